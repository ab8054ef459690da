#ifndef TITAN_LIB_MODEL_TENSOR_MEMO_H_
#define TITAN_LIB_MODEL_TENSOR_MEMO_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace titan {

// The last value made from a tensor (under a key), for a later caller holding the same tensor,
// unchanged since (its version counter): the linears reading one input (wq, wk and wv; w1 and w3)
// cast it once. The source is known by a weak reference, so the memo keeps it alive no longer;
// the value is held until the next Store. Inference tensors (no version counter) are never found.
// One per thread: declare it thread_local.
template <typename Key, typename Value>
class TensorMemo {
 public:
  // The stored value when `source` is the tensor it was made from, unchanged, and `key` matches.
  const Value* Find(const at::Tensor& source, const Key& key) const {
    if (!value_ || source.is_inference() || !(key_ == key) || version_ != source._version()) {
      return nullptr;
    }
    const c10::intrusive_ptr<c10::TensorImpl> alive = source_.lock();
    return alive && alive.get() == source.unsafeGetTensorImpl() ? &*value_ : nullptr;
  }

  void Store(const at::Tensor& source, Key key, Value value) {
    if (source.is_inference()) return;
    source_ = c10::weak_intrusive_ptr<c10::TensorImpl>(source.getIntrusivePtr());
    version_ = source._version();
    key_ = std::move(key);
    value_ = std::move(value);
  }

 private:
  c10::weak_intrusive_ptr<c10::TensorImpl> source_{c10::intrusive_ptr<c10::TensorImpl>()};
  int64_t version_ = 0;
  Key key_{};
  std::optional<Value> value_;
};

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TENSOR_MEMO_H_
