#include "lib/parallel/context_parallel.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/model/op_cache.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tags of the point-to-point streams between ring neighbours.
constexpr int kKvTag = 0;
constexpr int kMetaTag = 1;
constexpr int kGradTag = 2;

void Check(const absl::Status& status, const char* what, const Communicator& comm) {
  TORCH_CHECK(status.ok(), "context parallel ", what, " on group ", comm.name(), ": ",
              status.ToString());
}

// Sends each of `send` to the next member and receives each of `receive` from the previous one,
// as one batch (on NCCL one group: the sends and receives run together), without waiting.
std::unique_ptr<Work> ExchangeWithNeighbours(Communicator* cp, const std::vector<at::Tensor>& send,
                                             const std::vector<at::Tensor>& receive,
                                             const std::vector<int>& tags) {
  const int next = (cp->rank() + 1) % cp->size();
  const int previous = (cp->rank() + cp->size() - 1) % cp->size();
  std::vector<P2POp> ops;
  for (size_t i = 0; i < tags.size(); ++i) ops.push_back({true, send[i], next, tags[i]});
  for (size_t i = 0; i < tags.size(); ++i) ops.push_back({false, receive[i], previous, tags[i]});
  absl::StatusOr<std::unique_ptr<Work>> work = cp->BatchP2P(std::move(ops));
  Check(work.status(), "exchange", *cp);
  return *std::move(work);
}

void WaitFor(std::unique_ptr<Work>& work, Communicator* cp) {
  if (work == nullptr) return;
  Check(work->Wait(), "exchange", *cp);
  work.reset();
}

// Every member's key/value block ([2, B, Hkv, S, D], keys then values) and its key description ([B,
// 3, S] int64: positions, documents, validity), one per step in ring order: step s gives the block
// of member (rank - s) mod size.
class KvBlocks {
 public:
  KvBlocks(Communicator* cp, KvRotation rotation, const at::Tensor& kv, const at::Tensor& meta)
      : cp_(cp), rotation_(rotation), kv_(kv), meta_(meta) {
    if (rotation_ == KvRotation::kAllGather && cp_->size() > 1) {
      gathered_kv_ = Gather(kv);
      gathered_meta_ = Gather(meta);
    }
  }

  std::pair<at::Tensor, at::Tensor> Next() {
    const int step = step_++;
    const int size = cp_->size();
    if (rotation_ == KvRotation::kAllGather && size > 1) {
      const int owner = (cp_->rank() - step + size) % size;
      return {gathered_kv_[owner], gathered_meta_[owner]};
    }
    if (step > 0) {
      WaitFor(pending_, cp_);
      kv_ = incoming_kv_;
      meta_ = incoming_meta_;
    }
    if (step + 1 < size) {
      incoming_kv_ = at::empty_like(kv_);
      incoming_meta_ = at::empty_like(meta_);
      pending_ = ExchangeWithNeighbours(cp_, {kv_, meta_}, {incoming_kv_, incoming_meta_},
                                        {kKvTag, kMetaTag});
    }
    return {kv_, meta_};
  }

 private:
  at::Tensor Gather(const at::Tensor& x) const {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.insert(shape.begin(), cp_->size());
    at::Tensor gathered = at::empty(shape, x.options());
    Check(Await(cp_->AllGather(x, gathered)), "all-gather", *cp_);
    return gathered;
  }

  Communicator* cp_;
  KvRotation rotation_;
  int step_ = 0;
  at::Tensor kv_, meta_;                    // ring: the current step's block
  at::Tensor incoming_kv_, incoming_meta_;  // ring: the next step's, being received
  std::unique_ptr<Work> pending_;
  at::Tensor gathered_kv_, gathered_meta_;  // all-gather: [size, ...]
};

// Collects the key/value gradient of each step's block (KvBlocks' order) and returns the sum for
// this member's own block: all-gather sums every block's over members with one reduce-scatter; the
// ring passes each block's running sum on with the block, one more hop brings it home.
class KvGradients {
 public:
  KvGradients(Communicator* cp, KvRotation rotation, const at::Tensor& like)
      : cp_(cp), rotation_(rotation) {
    if (rotation_ == KvRotation::kAllGather && cp_->size() > 1) {
      std::vector<int64_t> shape = like.sizes().vec();
      shape.insert(shape.begin(), cp_->size());
      all_ = at::zeros(shape, like.options());
    }
  }

  void Add(const at::Tensor& grad) {
    const int step = step_++;
    const int size = cp_->size();
    if (size == 1) {
      sum_ = grad;
    } else if (rotation_ == KvRotation::kAllGather) {
      all_[(cp_->rank() - step + size) % size].copy_(grad);
    } else {
      if (step > 0) WaitFor(pending_, cp_);
      sum_ = step > 0 ? incoming_ + grad : grad.contiguous();
      incoming_ = at::empty_like(sum_);
      pending_ = ExchangeWithNeighbours(cp_, {sum_}, {incoming_}, {kGradTag});
    }
  }

  at::Tensor Finish() {
    if (cp_->size() == 1) return sum_;
    if (rotation_ == KvRotation::kAllGather) {
      at::Tensor own = at::empty(all_.sizes().slice(1), all_.options());
      Check(Await(cp_->ReduceScatter(all_, own, ReduceOp::kSum)), "reduce-scatter", *cp_);
      return own;
    }
    WaitFor(pending_, cp_);
    return incoming_;
  }

 private:
  Communicator* cp_;
  KvRotation rotation_;
  int step_ = 0;
  at::Tensor all_;             // all-gather: [size, ...], one slot per block
  at::Tensor sum_, incoming_;  // ring: the running sum sent on, the one being received
  std::unique_ptr<Work> pending_;
};

// Where a query of `query` ([B, 3, Sq]) sees a key of `key` ([B, 3, Sk]), as an additive bias.
std::optional<at::Tensor> BlockBias(const at::Tensor& query, const at::Tensor& key,
                                    at::ScalarType dtype) {
  MaskInputs inputs;
  inputs.query_positions = query.select(1, 0);
  inputs.key_positions = key.select(1, 0);
  inputs.query_documents = query.select(1, 1);
  inputs.key_documents = key.select(1, 1);
  inputs.key_valid = key.select(1, 2).to(at::kBool);
  return AttentionBias(BuildAttentionMask(inputs), dtype);
}

// The forward over every block: (out in q's dtype, logsumexp [B, Hq, S] fp32).
std::pair<at::Tensor, at::Tensor> RingForward(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, const at::Tensor& meta,
                                              Communicator* cp, KvRotation rotation) {
  c10::NoGradGuard no_grad;
  const int64_t n_rep = q.size(1) / k.size(1);
  KvBlocks blocks(cp, rotation, at::stack({k, v}), meta);
  at::Tensor out;
  at::Tensor lse;
  for (int step = 0; step < cp->size(); ++step) {
    auto [kv, key_meta] = blocks.Next();
    auto [block_out, block_lse] =
        AttentionKernelForward(q, RepeatKvHeads(kv[0], n_rep), RepeatKvHeads(kv[1], n_rep),
                               BlockBias(meta, key_meta, q.scalar_type()), /*is_causal=*/false);
    if (step == 0) {
      out = block_out.to(at::kFloat);
      lse = block_lse;
      continue;
    }
    // Rows that see nothing of a block have a logsumexp near the lowest float: weight 0.
    const at::Tensor merged = at::logaddexp(lse, block_lse);
    out = out * (lse - merged).exp().unsqueeze(-1) +
          block_out.to(at::kFloat) * (block_lse - merged).exp().unsqueeze(-1);
    lse = merged;
  }
  return {out.to(q.scalar_type()), lse};
}

struct RingAttentionFunction : public torch::autograd::Function<RingAttentionFunction> {
  // `kept` (out, logsumexp: selective checkpointing's replay) skips the forward's computation.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& meta, Communicator* cp,
                            int64_t rotation,
                            const std::optional<std::pair<at::Tensor, at::Tensor>>& kept) {
    at::Tensor out;
    at::Tensor lse;
    if (kept) {
      out = kept->first.detach();  // a fresh tensor for autograd to attach this node to
      lse = kept->second;
    } else {
      std::tie(out, lse) = RingForward(q, k, v, meta, cp, static_cast<KvRotation>(rotation));
    }
    ctx->save_for_backward({q, k, v, meta, lse, out});
    // The group outlives every graph built from it; a plain address needs no registration.
    ctx->saved_data["cp"] = reinterpret_cast<int64_t>(cp);
    ctx->saved_data["rotation"] = rotation;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& q = saved[0];
    const at::Tensor& meta = saved[3];
    const at::Tensor& lse = saved[4];
    const at::Tensor& out = saved[5];
    auto* cp = reinterpret_cast<Communicator*>(ctx->saved_data["cp"].toInt());
    const auto rotation = static_cast<KvRotation>(ctx->saved_data["rotation"].toInt());
    const int64_t n_rep = q.size(1) / saved[1].size(1);
    const at::Tensor grad = grad_outputs[0].contiguous();
    KvBlocks blocks(cp, rotation, at::stack({saved[1], saved[2]}), meta);
    at::Tensor grad_q = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    std::optional<KvGradients> grad_kv;
    for (int step = 0; step < cp->size(); ++step) {
      auto [kv, key_meta] = blocks.Next();
      // The merged output and logsumexp make each block's softmax the global one.
      auto [dq, dk, dv] = AttentionKernelBackward(
          grad, q, RepeatKvHeads(kv[0], n_rep), RepeatKvHeads(kv[1], n_rep), out, lse,
          BlockBias(meta, key_meta, q.scalar_type()), /*is_causal=*/false);
      grad_q += dq;
      // Grouped heads: each key/value head's gradient sums its repeats.
      at::Tensor dkv = at::stack({dk, dv}).unflatten(2, {kv.size(2), n_rep}).sum(3);
      if (!grad_kv) grad_kv.emplace(cp, rotation, dkv.to(at::kFloat));
      grad_kv->Add(dkv.to(at::kFloat));
    }
    const at::Tensor dkv = grad_kv->Finish().to(saved[1].scalar_type());
    return {grad_q.to(q.scalar_type()),
            dkv[0],
            dkv[1],
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// [B, 3, S] int64: positions, documents (0: one document), validity (1: every key is real).
at::Tensor KeyMeta(const MaskInputs& mask) {
  const at::Tensor& positions = mask.query_positions;
  const at::Tensor documents =
      mask.query_documents.defined() ? mask.query_documents : at::zeros_like(positions);
  const at::Tensor valid =
      mask.key_valid.defined() ? mask.key_valid.to(at::kLong) : at::ones_like(positions);
  return at::stack({positions, documents, valid}, 1).contiguous();
}

}  // namespace

at::Tensor RingAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const MaskInputs& mask, Communicator* cp, KvRotation rotation) {
  // Below autocast, as Attention: cast the inputs as autocast would for attention.
  const at::Tensor q_in = AutocastInput(q);
  const at::Tensor k_in = AutocastInput(k).contiguous();
  const at::Tensor v_in = AutocastInput(v).contiguous();
  const at::Tensor meta = KeyMeta(mask);
  const int64_t method = static_cast<int64_t>(rotation);
  // Op-level selective checkpointing keeps attention's output and logsumexp, as for Attention.
  OpCache* cache = CurrentOpCache();
  if (cache != nullptr && CurrentOpCacheMode() == OpCache::Mode::kRecord) {
    auto [out, lse] = RingForward(q_in, k_in, v_in, meta, cp, rotation);
    cache->Push(out);
    cache->Push(lse);
    return out;
  }
  std::optional<std::pair<at::Tensor, at::Tensor>> kept;
  if (cache != nullptr) {
    at::Tensor out = cache->Pop();
    kept.emplace(out, cache->Pop());
  }
  return RingAttentionFunction::apply(q_in, k_in, v_in, meta, cp, method, kept);
}

absl::StatusOr<std::unique_ptr<ContextParallel>> ContextParallel::Create(
    Communicator* cp, const std::string& load_balancer, const std::string& rotate_method) {
  if (load_balancer != "headtail" && load_balancer != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parallelism] context_parallel_load_balancer: expected headtail or none, got \"",
        load_balancer, "\""));
  }
  if (rotate_method != "allgather" && rotate_method != "alltoall") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parallelism] context_parallel_rotate_method: expected allgather or alltoall, got \"",
        rotate_method, "\""));
  }
  return std::unique_ptr<ContextParallel>(new ContextParallel(
      cp, load_balancer == "headtail",
      rotate_method == "allgather" ? KvRotation::kAllGather : KvRotation::kRing));
}

void ContextParallel::Apply(Decoder& model) const {
  Communicator* cp = cp_;
  const KvRotation rotation = rotation_;
  model.parallel_hooks().attention = [cp, rotation](const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v,
                                                    const BatchContext& batch) {
    return RingAttention(q, k, v, batch.mask_inputs, cp, rotation);
  };
}

absl::StatusOr<at::Tensor> ContextParallel::LocalPositions(int64_t seq_len,
                                                           const at::Device& device) const {
  const int64_t size = cp_->size();
  const int64_t rank = cp_->rank();
  const int64_t chunks = head_tail_ ? 2 * size : size;
  if (seq_len % chunks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("context parallelism over ", size, " ranks", head_tail_ ? " (headtail)" : "",
                     " needs sequences of a multiple of ", chunks, " tokens, got ", seq_len));
  }
  const int64_t chunk = seq_len / chunks;
  // Made where the batch is: a copy from host memory to a GPU would wait for its queue.
  const at::TensorOptions options = at::TensorOptions(at::kLong).device(device);
  const at::Tensor head = at::arange(rank * chunk, (rank + 1) * chunk, options);
  if (!head_tail_) return head;
  const int64_t tail = chunks - 1 - rank;
  return at::cat({head, at::arange(tail * chunk, (tail + 1) * chunk, options)});
}

absl::StatusOr<Batch> ContextParallel::ShardBatch(const Batch& batch) const {
  const int64_t seq_len = batch.tokens.size(1);
  absl::StatusOr<at::Tensor> local = LocalPositions(seq_len, batch.tokens.device());
  if (!local.ok()) return local.status();
  const at::Tensor& index = *local;
  auto shard = [&](const at::Tensor& x) { return x.defined() ? x.index_select(1, index) : x; };
  Batch out;
  out.tokens = shard(batch.tokens);
  out.labels = shard(batch.labels);
  out.positions = batch.positions.defined()
                      ? shard(batch.positions)
                      : index.unsqueeze(0).expand({batch.tokens.size(0), index.size(0)});
  out.documents = shard(batch.documents);
  for (const auto& [name, tensor] : batch.extra) out.extra[name] = shard(tensor);
  return out;
}

}  // namespace titan
