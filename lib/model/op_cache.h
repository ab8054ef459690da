#ifndef TITAN_LIB_MODEL_OP_CACHE_H_
#define TITAN_LIB_MODEL_OP_CACHE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lib/model/module.h"

namespace titan {

// Op-level selective activation checkpointing (torchtitan's "op" policy). While a checkpointed
// block's forward runs (grad off), Linear and Attention keep their outputs here: every attention,
// and the 1st, 3rd, 5th, ... linear of the block (torchtitan recomputes every second matmul).
// When backward recomputes the block (grad on), those ops hand back the kept outputs, wired into
// autograd with their own backward, so only the cheap ops between them (norms, RoPE, SiLU,
// residual adds) and every second linear run again.
class OpCache {
 public:
  enum class Mode { kRecord, kReplay };

  // Whether the next linear of the block keeps its output; counts it.
  bool NextLinearIsSaved() { return ++linears_ % 2 == 1; }
  void Push(at::Tensor tensor) { saved_.push_back(std::move(tensor)); }
  at::Tensor Pop() { return saved_.at(next_++); }
  // Rewinds for a replay of the same block.
  void StartReplay() {
    next_ = 0;
    linears_ = 0;
  }
  int64_t num_saved() const { return static_cast<int64_t>(saved_.size()); }

 private:
  std::vector<at::Tensor> saved_;
  size_t next_ = 0;
  int64_t linears_ = 0;
};

// Makes `cache` the current one on this thread, in `mode`, for the scope's lifetime.
class OpCacheScope {
 public:
  OpCacheScope(OpCache* cache, OpCache::Mode mode);
  ~OpCacheScope();
  OpCacheScope(const OpCacheScope&) = delete;
  OpCacheScope& operator=(const OpCacheScope&) = delete;

 private:
  OpCache* previous_cache_;
  OpCache::Mode previous_mode_;
};

// The current cache (null outside a selectively checkpointed block) and its mode.
OpCache* CurrentOpCache();
OpCache::Mode CurrentOpCacheMode();

// x @ weightᵀ for weights in nn.Linear's [out, in] layout, by `fn` when set (a converted layer):
// the decoder's matmuls go through here so op-level selective checkpointing can keep or replay them.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const LinearFn& fn = nullptr);

// The dtype autocast would cast a floating tensor to for the ops it runs in lower precision
// (matmuls, attention) on `tensor`'s device; `tensor`'s own when autocast is off.
at::ScalarType AutocastDtype(const at::Tensor& tensor);

// `tensor` cast to AutocastDtype. Replayed ops bypass the dispatcher's autocast, so they cast their
// inputs the same way themselves.
at::Tensor AutocastInput(const at::Tensor& tensor);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_OP_CACHE_H_
