#include "lib/parallel/tensor_parallel.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/parallel/collectives.h"

namespace titan {
namespace {

}  // namespace

std::optional<int64_t> TensorParallel::SplitDimOf(const std::string& name) {
  for (const char* column : {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight",
                             "feed_forward.w1.weight", "feed_forward.w3.weight"}) {
    if (absl::EndsWith(name, column)) return 0;
  }
  for (const char* row : {"attention.wo.weight", "feed_forward.w2.weight"}) {
    if (absl::EndsWith(name, row)) return 1;
  }
  if (name == "tok_embeddings.weight" || name == "output.weight") return 0;
  return std::nullopt;
}

namespace {

// Replicated parameters whose gradient each rank only partly computes: qk-norms see this rank's
// heads; with sequence parallelism the other norms see its slice of the sequence.
bool HasPartialGradient(const std::string& name, bool sequence_parallel) {
  if (absl::EndsWith(name, "q_norm.weight") || absl::EndsWith(name, "k_norm.weight")) return true;
  return sequence_parallel && (absl::EndsWith(name, "attention_norm.weight") ||
                               absl::EndsWith(name, "ffn_norm.weight") || name == "norm.weight");
}

absl::Status NotDivisible(const char* what, int64_t count, int degree) {
  return absl::InvalidArgumentError(absl::StrCat("[parallelism] tensor_parallel_degree=", degree,
                                                 " does not divide the model's ", what, " (", count,
                                                 ")"));
}

}  // namespace

absl::Status TensorParallel::CheckDivisible(const TransformerArgs& args, int degree) {
  if (args.n_heads % degree != 0) return NotDivisible("attention heads", args.n_heads, degree);
  if (args.kv_heads() % degree != 0) {
    return NotDivisible("key/value heads", args.kv_heads(), degree);
  }
  if (args.ffn_hidden_dim % degree != 0) {
    return NotDivisible("feed-forward hidden size", args.ffn_hidden_dim, degree);
  }
  if (args.vocab_size % degree != 0)
    return NotDivisible("vocabulary size", args.vocab_size, degree);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TensorParallel>> TensorParallel::Apply(
    Decoder& model, const TensorParallelOptions& options, Communicator* tp) {
  if (absl::Status status = CheckDivisible(model.args(), tp->size()); !status.ok()) return status;
  std::unique_ptr<TensorParallel> parallel(new TensorParallel(options, tp));
  for (const ParamRef& param : model.NamedParameters()) {
    if (std::optional<int64_t> dim = SplitDimOf(param.name)) {
      const int64_t rows = param.tensor->size(*dim) / tp->size();
      parallel->shards_[param.name] = {*dim, param.tensor->sizes().vec(), tp->rank() * rows};
    } else if (HasPartialGradient(param.name, options.sequence_parallel)) {
      parallel->partial_.push_back(param);
    }
  }
  parallel->InstallHooks(model);
  return parallel;
}

void TensorParallel::InstallHooks(Decoder& model) const {
  Communicator* tp = tp_;
  const int64_t rank = tp_->rank();
  ParallelHooks& hooks = model.parallel_hooks();
  // Vocab-parallel lookup: tokens outside this rank's rows embed as zeros, the sum over ranks
  // (region_out) completes every row.
  hooks.embed = [rank](const at::Tensor& table, const at::Tensor& tokens) {
    const int64_t rows = table.size(0);
    const at::Tensor local = tokens - rank * rows;
    const at::Tensor outside = local.lt(0).logical_or(local.ge(rows));
    return at::embedding(table, local.masked_fill(outside, 0))
        .masked_fill(outside.unsqueeze(-1), 0.0);
  };
  if (options_.sequence_parallel) {
    hooks.region_in = [tp](const at::Tensor& x) { return AllGatherAlongDim(x, 1, tp); };
    hooks.region_out = [tp](const at::Tensor& x) { return ReduceScatterAlongDim(x, 1, tp); };
  } else {
    hooks.region_in = [tp](const at::Tensor& x) { return CopyToRegion(x, tp); };
    hooks.region_out = [tp](const at::Tensor& x) { return SumOverRegion(x, tp); };
  }
  if (!options_.loss_parallel) {
    hooks.logits = [tp](const at::Tensor& x) { return GatherForReplicatedUse(x, -1, tp); };
  }
}

void TensorParallel::ShardParameters(const std::vector<ParamRef>& params) {
  c10::NoGradGuard no_grad;
  for (const ParamRef& param : params) {
    auto it = shards_.find(param.name);
    if (it == shards_.end()) continue;
    const TensorParallelShard& shard = it->second;
    const at::Tensor& full = *param.tensor;
    TORCH_CHECK(full.sizes().vec() == shard.global_shape, "tensor parallel: ", param.name,
                " holds ", c10::str(full.sizes()), ", expected the whole ",
                c10::str(shard.global_shape));
    const int64_t rows = shard.global_shape[shard.dim] / tp_->size();
    *param.tensor = full.narrow(shard.dim, shard.offset, rows)
                        .clone(at::MemoryFormat::Contiguous)
                        .requires_grad_(full.requires_grad());
  }
}

const TensorParallelShard* TensorParallel::ShardOf(const std::string& name,
                                                   at::IntArrayRef shape) const {
  auto it = shards_.find(name);
  if (it == shards_.end()) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return nullptr;
    it = shards_.find(name.substr(0, dot));
    if (it == shards_.end()) return nullptr;
  }
  const TensorParallelShard& shard = it->second;
  if (shape.size() != shard.global_shape.size()) return nullptr;
  for (size_t d = 0; d < shape.size(); ++d) {
    const bool split = static_cast<int64_t>(d) == shard.dim;
    if (shape[d] != (split ? shard.global_shape[d] / tp_->size() : shard.global_shape[d])) {
      return nullptr;
    }
  }
  return &shard;
}

absl::StatusOr<at::Tensor> TensorParallel::GatherFull(const TensorParallelShard& shard,
                                                      const at::Tensor& local) const {
  c10::NoGradGuard no_grad;
  try {
    return GatherForReplicatedUse(local.detach(), shard.dim, tp_);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("tensor parallel gather: ", e.what_without_backtrace()));
  }
}

absl::Status TensorParallel::ReduceReplicatedGradients() const {
  std::vector<at::Tensor> grads;
  for (const ParamRef& param : partial_) {
    if (param.tensor->grad().defined()) grads.push_back(param.tensor->grad());
  }
  if (grads.empty()) return absl::OkStatus();
  // One collective for all of them (a few small vectors).
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> flat;
  for (const at::Tensor& grad : grads) flat.push_back(grad.reshape(-1));
  at::Tensor buffer = at::cat(flat);
  if (absl::Status status = Await(tp_->AllReduce(buffer, ReduceOp::kSum)); !status.ok()) {
    return status;
  }
  int64_t offset = 0;
  for (const at::Tensor& grad : grads) {
    grad.copy_(buffer.narrow(0, offset, grad.numel()).view(grad.sizes()));
    offset += grad.numel();
  }
  return absl::OkStatus();
}

bool TensorParallel::OwnsCopy(const std::string& name) const {
  if (tp_->rank() == 0) return true;
  const size_t dot = name.rfind('.');
  return shards_.contains(name) ||
         (dot != std::string::npos && shards_.contains(name.substr(0, dot)));
}

}  // namespace titan
