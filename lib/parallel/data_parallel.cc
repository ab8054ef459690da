#include "lib/parallel/data_parallel.h"

#include <c10/core/GradMode.h>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/parallel/collectives.h"
#include "lib/parallel/loss_parallel.h"
#include "lib/util/status_macros.h"

namespace titan {

DataParallel::DataParallel(std::vector<std::unique_ptr<FsdpParamGroup>> groups,
                           FsdpParamGroup* root, bool reshard_root,
                           FsdpParamGroup* first_in_backward, Communicator* shard)
    : groups_(std::move(groups)),
      root_(root),
      reshard_root_(reshard_root),
      first_in_backward_(first_in_backward),
      shard_(shard) {
  if (!groups_.empty()) reduce_scatter_queue_ = std::make_unique<FsdpReduceScatterQueue>();
  for (const auto& group : groups_) {
    group->set_reduce_scatter_queue(reduce_scatter_queue_.get());
    for (const FsdpParamGroup::Param& param : group->params()) {
      by_name_[param.name] = {group.get(), &param};
    }
  }
}

void DataParallel::SetModelParallel(std::unique_ptr<TensorParallel> tensor_parallel,
                                    std::unique_ptr<ContextParallel> context_parallel) {
  tp_ = std::move(tensor_parallel);
  cp_ = std::move(context_parallel);
}

int DataParallel::context_parallel_degree() const {
  return cp_ != nullptr ? cp_->group()->size() : 1;
}

absl::StatusOr<Batch> DataParallel::ShardBatch(const Batch& batch) const {
  return cp_ != nullptr ? cp_->ShardBatch(batch) : batch;
}

HeadLoss DataParallel::Loss(LossFn loss, int64_t fused_chunk_tokens) const {
  Communicator* tp = tp_ != nullptr ? tp_->group() : nullptr;
  HeadLoss head_loss;
  if (!loss && fused_chunk_tokens > 0) {
    // The head's weight is split by vocabulary rows under tensor parallelism, whatever the logits.
    head_loss.fused = ChunkedCrossEntropySum(fused_chunk_tokens, tp);
    return head_loss;
  }
  const bool vocab_shards = tp != nullptr && tp_->loss_parallel();
  if (!loss) {
    head_loss.logits = vocab_shards ? VocabParallelCrossEntropySum(tp) : CrossEntropySum();
  } else if (!vocab_shards) {
    head_loss.logits = std::move(loss);
  } else {
    head_loss.logits = [tp, loss](const at::Tensor& logits, const Batch& batch) {
      return loss(GatherForReplicatedUse(logits, -1, tp), batch);
    };
  }
  return head_loss;
}

at::Tensor DataParallel::Forward(const std::function<at::Tensor()>& forward) {
  // A prefetch left by an interrupted forward holds parameters from before the optimizer step.
  for (const auto& group : groups_) group->DropPrefetch();
  const at::Tensor out =
      root_ == nullptr ? forward()
                       : root_->CallUnsharded([&forward](const at::Tensor&) { return forward(); },
                                              at::Tensor(), reshard_root_);
  if (first_in_backward_ != nullptr && c10::GradMode::is_enabled() && out.requires_grad()) {
    FsdpParamGroup* first = first_in_backward_;
    out.register_hook([first](const at::Tensor& grad) {
      first->Prefetch();
      return grad;
    });
  }
  return out;
}

absl::StatusOr<std::unique_ptr<DataParallel::GatheredScope>> DataParallel::GatheredScope::Gather(
    DataParallel& data_parallel) {
  std::unique_ptr<GatheredScope> scope(new GatheredScope());
  try {
    for (const auto& group : data_parallel.groups_) {
      group->Hold();
      scope->held_.push_back(group.get());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("gathering the model: ", e.what_without_backtrace()));
  }
  return scope;
}

DataParallel::GatheredScope::~GatheredScope() {
  for (FsdpParamGroup* group : held_) group->Release();
}

void DataParallel::BeginBackward(bool last_microbatch) {
  if (ddp_ != nullptr) ddp_->set_sync(last_microbatch);
}

absl::Status DataParallel::FinishBackward() {
  if (reduce_scatter_queue_ != nullptr) TITAN_RETURN_IF_ERROR(reduce_scatter_queue_->Drain());
  if (ddp_ != nullptr) TITAN_RETURN_IF_ERROR(ddp_->Finish());
  return tp_ != nullptr ? tp_->ReduceReplicatedGradients() : absl::OkStatus();
}

absl::Status DataParallel::PrecomputeFloat8Scales() {
  std::vector<int64_t> counts;
  std::vector<at::Tensor> amaxes;
  const FsdpParamGroup* reducer = nullptr;  // the groups share their communicators
  for (const auto& group : groups_) {
    std::vector<at::Tensor> local = group->Float8ShardAmaxes();
    counts.push_back(static_cast<int64_t>(local.size()));
    amaxes.insert(amaxes.end(), local.begin(), local.end());
    if (!local.empty()) reducer = group.get();
  }
  if (amaxes.empty()) return absl::OkStatus();
  const at::Tensor global = at::stack(amaxes);
  TITAN_RETURN_IF_ERROR(reducer->AllReduceFloat8Amaxes(global));
  LOG_FIRST_N(INFO, 1) << "float8 scales of " << amaxes.size()
                       << " FSDP weights precomputed in one all-reduce";
  int64_t next = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (counts[g] > 0) {
      groups_[g]->SetFloat8Scales(global.slice(0, next, next + counts[g]).unbind());
    }
    next += counts[g];
  }
  return absl::OkStatus();
}

SquaredNormReducer DataParallel::GradNormReducer(const std::vector<ParamRef>& params) const {
  if (shard_ == nullptr && tp_ == nullptr) return nullptr;
  // Tensor-parallel ranks hold different slices of split parameters (each counts) and the same
  // replicated ones (the first counts).
  std::vector<float> weights;
  for (const ParamRef& param : params) {
    weights.push_back(tp_ == nullptr || tp_->OwnsCopy(param.name) ? 1.0f : 0.0f);
  }
  // On the parameters' device now: a copy from the host in every step would wait for the device.
  const at::Tensor weight = at::tensor(weights).to(
      params.empty() ? at::Device(at::kCPU) : params.front().tensor->device());
  Communicator* shard = shard_;
  Communicator* tp = tp_ != nullptr ? tp_->group() : nullptr;
  // Padding rows hold zero gradients, so the shards' squares sum to the full norm's square.
  return [weight, shard, tp](const at::Tensor& squares) {
    at::Tensor total = (squares * weight).sum();
    for (Communicator* group : {shard, tp}) {
      if (group == nullptr) continue;
      const absl::Status status = Await(group->AllReduce(total, ReduceOp::kSum));
      TORCH_CHECK(status.ok(), "gradient norm all-reduce: ", status.ToString());
    }
    return total;
  };
}

const FsdpParamGroup::Param* DataParallel::ShardedParamOf(const std::string& name,
                                                          const at::Tensor& tensor,
                                                          const FsdpParamGroup** group) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) return nullptr;
    it = by_name_.find(name.substr(0, dot));
    if (it == by_name_.end()) return nullptr;
  }
  if (tensor.sizes() != it->second.second->shard.sizes()) return nullptr;
  *group = it->second.first;
  return it->second.second;
}

absl::StatusOr<at::Tensor> DataParallel::GatherWhole(const std::string& name,
                                                     const at::Tensor& tensor) const {
  at::Tensor whole = tensor;
  const FsdpParamGroup* group = nullptr;
  if (const FsdpParamGroup::Param* param = ShardedParamOf(name, tensor, &group)) {
    TITAN_ASSIGN_OR_RETURN(whole, group->GatherFull(*param, tensor));
  }
  if (const TensorParallelShard* slice = tp_ ? tp_->ShardOf(name, whole.sizes()) : nullptr) {
    TITAN_ASSIGN_OR_RETURN(whole, tp_->GatherFull(*slice, whole));
  }
  return whole;
}

absl::Status DataParallel::GatherFull(const NamedTensors& local,
                                      const WholeTensorSink& sink) const {
  for (const auto& [name, tensor] : local) {
    TITAN_ASSIGN_OR_RETURN(const at::Tensor whole, GatherWhole(name, tensor));
    TITAN_RETURN_IF_ERROR(sink(name, whole));
  }
  return absl::OkStatus();
}

NamedTensors DataParallel::CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const {
  NamedTensors pieces;
  pieces.reserve(local.size());
  for (const auto& [name, tensor] : local) {
    at::Tensor piece = tensor;
    // This rank's tensor-parallel slice is the whole tensor until tensor parallelism says more.
    TensorBox box{tensor.sizes().vec(), std::vector<int64_t>(tensor.dim(), 0)};
    const FsdpParamGroup* group = nullptr;
    if (const FsdpParamGroup::Param* param = ShardedParamOf(name, tensor, &group)) {
      box.global_shape = param->full_shape;
      box.offsets[0] = group->FirstRowHeld(*param);
      piece = tensor.narrow(0, 0, group->RowsHeld(*param));
    }
    const TensorParallelShard* slice = tp_ ? tp_->ShardOf(name, box.global_shape) : nullptr;
    if (slice != nullptr) {
      box.offsets[slice->dim] += slice->offset;
      box.global_shape = slice->global_shape;
    }
    if (group != nullptr || slice != nullptr) boxes[name] = std::move(box);
    pieces.emplace_back(name, piece);
  }
  return pieces;
}

bool DataParallel::WritesPiece(const std::string& name) const {
  return tp_ == nullptr || tp_->OwnsCopy(name);
}

}  // namespace titan
