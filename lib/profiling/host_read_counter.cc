#include "lib/profiling/host_read_counter.h"

#include <string_view>

namespace titan {
namespace {

constexpr std::string_view kHostReadOps[] = {
    "aten::_local_scalar_dense", "aten::nonzero",  "aten::masked_select",
    "aten::_unique",             "aten::_unique2", "aten::unique_consecutive",
    "aten::unique_dim",          "aten::bincount", "aten::equal"};

thread_local HostReadCounter* t_counter = nullptr;

}  // namespace

HostReadCounter::HostReadCounter(const std::vector<at::Tensor>& expected) {
  TORCH_CHECK(t_counter == nullptr, "one HostReadCounter at a time on a thread");
  for (const at::Tensor& t : expected) expected_.insert(t.unsafeGetTensorImpl());
  t_counter = this;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&Count).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

HostReadCounter::~HostReadCounter() {
  at::removeCallback(handle_);
  t_counter = nullptr;
}

std::unique_ptr<at::ObserverContext> HostReadCounter::Count(const at::RecordFunction& fn) {
  HostReadCounter* counter = t_counter;
  const std::string_view name = fn.name();
  bool reads = false;
  for (std::string_view op : kHostReadOps) reads = reads || name == op;
  if (!reads) return nullptr;
  const c10::ArrayRef<c10::IValue> inputs = fn.inputs();
  if (name == "aten::_local_scalar_dense" && !inputs.empty() && inputs[0].isTensor() &&
      counter->expected_.contains(inputs[0].toTensor().unsafeGetTensorImpl())) {
    ++counter->expected_reads_;
  } else {
    ++counter->reads_;
  }
  return nullptr;
}

}  // namespace titan
