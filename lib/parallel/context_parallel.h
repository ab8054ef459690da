#ifndef TITAN_LIB_PARALLEL_CONTEXT_PARALLEL_H_
#define TITAN_LIB_PARALLEL_CONTEXT_PARALLEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/model/attention.h"
#include "lib/model/decoder.h"
#include "lib/train/loss.h"

namespace titan {

// How a context-parallel rank gets the other ranks' keys and values ([parallelism]
// context_parallel_rotate_method): all at once ("allgather": one all-gather, gradients
// reduce-scattered back), or passed around the ring one rank's block per step ("alltoall": send to
// the next rank, receive from the previous; gradients travel with their block).
enum class KvRotation { kAllGather, kRing };

// Ring attention: softmax(q kᵀ/√D + mask) v over the whole sequence while each of the members of
// `cp` holds only its share of it. q [B, Hq, S, D], k and v [B, Hkv, S, D] (grouped-query heads are
// repeated per block) and `mask`'s query/key tensors [B, S] describe this member's tokens; a key is
// visible where BuildAttentionMask says (positions not after the query's, same document, valid).
// Each member's key/value block is attended to in turn and the partial results are merged by
// log-sum-exp; backward passes the blocks around again and returns each block's key/value gradients
// to its owner. Every member calls it with the same shapes. `cp` must outlive the graph.
at::Tensor RingAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const MaskInputs& mask, Communicator* cp, KvRotation rotation);

// Context parallelism (torchtitan's, for SDPA): every sequence of a batch is split over the members
// of the context-parallel group and attention becomes RingAttention. With the "headtail" load
// balancer the sequence is cut into 2·cp chunks and rank i holds chunks i and 2·cp−1−i (each rank
// then has as much causal work as another); with "none" rank i holds chunk i of cp.
class ContextParallel {
 public:
  // `load_balancer`: "headtail" or "none"; `rotate_method`: "allgather" or "alltoall" (the
  // [parallelism] keys' values). `cp` must outlive the model.
  static absl::StatusOr<std::unique_ptr<ContextParallel>> Create(Communicator* cp,
                                                                 const std::string& load_balancer,
                                                                 const std::string& rotate_method);

  // Makes RingAttention the decoder's attention.
  void Apply(Decoder& model) const;
  // The positions of a sequence of `seq_len` this rank holds, in its local order, on `device`.
  absl::StatusOr<at::Tensor> LocalPositions(int64_t seq_len,
                                            const at::Device& device = at::kCPU) const;
  // This rank's share of every [B, S] tensor of `batch` (tokens, labels, documents, extra) along
  // the sequence, positions included (0 .. S-1 when unset), so RoPE and masks see global positions.
  absl::StatusOr<Batch> ShardBatch(const Batch& batch) const;
  Communicator* group() const { return cp_; }

 private:
  ContextParallel(Communicator* cp, bool head_tail, KvRotation rotation)
      : cp_(cp), head_tail_(head_tail), rotation_(rotation) {}

  Communicator* cp_;
  bool head_tail_;
  KvRotation rotation_;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_CONTEXT_PARALLEL_H_
