#include "lib/model/bf16_weight_copies.h"

#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <unordered_map>

namespace titan {
namespace {

struct Copy {
  c10::weak_intrusive_ptr<c10::TensorImpl> weight{c10::intrusive_ptr<c10::TensorImpl>()};
  at::Tensor data;       // undefined until the optimizer first writes it
  int64_t version = -1;  // the weight's version counter when the copy was written
};

std::atomic<bool> g_enabled{false};
std::mutex g_mutex;

std::unordered_map<const c10::TensorImpl*, Copy>& Copies() {
  static auto* copies = new std::unordered_map<const c10::TensorImpl*, Copy>();
  return *copies;
}

// The entry of a live `weight`, or null (an entry whose weight died is dropped: its address may
// be another tensor's now).
Copy* Find(const at::Tensor& weight) {
  auto it = Copies().find(weight.unsafeGetTensorImpl());
  if (it == Copies().end()) return nullptr;
  if (it->second.weight.lock().get() != weight.unsafeGetTensorImpl()) {
    Copies().erase(it);
    return nullptr;
  }
  return &it->second;
}

}  // namespace

bool Bf16WeightCopiesEnabled() { return g_enabled; }

void SetBf16WeightCopiesEnabled(bool enabled) {
  g_enabled = enabled;
  if (enabled) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  Copies().clear();
}

at::Tensor Bf16WeightOf(const at::Tensor& weight) {
  // Only a parameter (a leaf) can be the optimizer's: a gathered or computed weight is cast.
  if (!g_enabled || weight.scalar_type() != at::kFloat || weight.is_inference() ||
      !weight.is_leaf()) {
    return weight.to(at::kBFloat16);
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (Copy* copy = Find(weight)) {
      if (copy->data.defined() && copy->version == weight._version()) return copy->data;
      copy->data = at::Tensor();  // stale: not held beside the cast (the optimizer makes another)
    } else {
      // Rare (once per weight): drop the entries of weights that died, with their copies.
      for (auto it = Copies().begin(); it != Copies().end();) {
        it = it->second.weight.expired() ? Copies().erase(it) : std::next(it);
      }
      Copies()[weight.unsafeGetTensorImpl()].weight =
          c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr());
    }
  }
  return weight.to(at::kBFloat16);
}

at::Tensor Bf16WeightCopyToWrite(const at::Tensor& param) {
  if (!g_enabled) return at::Tensor();
  std::lock_guard<std::mutex> lock(g_mutex);
  Copy* copy = Find(param);
  if (copy == nullptr) return at::Tensor();
  if (!copy->data.defined() || !copy->data.sizes().equals(param.sizes())) {
    copy->data = at::empty(param.sizes(), param.options().dtype(at::kBFloat16));
  }
  return copy->data;
}

void Bf16WeightCopyWritten(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (Copy* copy = Find(param)) copy->version = param._version();
}

void DropBf16WeightCopy(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Copies().erase(param.unsafeGetTensorImpl());
}

}  // namespace titan
