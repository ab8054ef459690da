#include "lib/parallel/data_parallel.h"

#include <c10/core/GradMode.h>

#include "absl/strings/str_cat.h"

namespace titan {

DataParallel::DataParallel(std::vector<std::unique_ptr<FsdpParamGroup>> groups,
                           FsdpParamGroup* root, Communicator* shard)
    : groups_(std::move(groups)), root_(root), shard_(shard) {
  for (const auto& group : groups_) {
    for (const FsdpParamGroup::Param& param : group->params()) {
      by_name_[param.name] = {group.get(), &param};
    }
  }
}

at::Tensor DataParallel::Forward(const std::function<at::Tensor()>& forward) {
  // A prefetch left by an interrupted forward holds parameters from before the optimizer step.
  for (const auto& group : groups_) group->DropPrefetch();
  if (root_ == nullptr) return forward();
  root_->Unshard();
  at::Tensor out = forward();
  root_->Reshard();
  return out;
}

void DataParallel::BeginBackward(bool last_microbatch) {
  if (ddp_ != nullptr) ddp_->set_sync(last_microbatch);
}

absl::Status DataParallel::FinishBackward() {
  return ddp_ != nullptr ? ddp_->Finish() : absl::OkStatus();
}

SquaredNormReducer DataParallel::GradNormReducer() {
  if (shard_ == nullptr) return nullptr;
  Communicator* shard = shard_;
  // Padding rows hold zero gradients, so the shards' squares sum to the full norm's square.
  return [shard](at::Tensor& squared_norm) {
    const absl::Status status = Await(shard->AllReduce(squared_norm, ReduceOp::kSum));
    TORCH_CHECK(status.ok(), "gradient norm all-reduce: ", status.ToString());
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

absl::StatusOr<NamedTensors> DataParallel::GatherFull(const NamedTensors& local) const {
  NamedTensors full;
  full.reserve(local.size());
  for (const auto& [name, tensor] : local) {
    const FsdpParamGroup* group = nullptr;
    const FsdpParamGroup::Param* param = ShardedParamOf(name, tensor, &group);
    if (param == nullptr) {
      full.emplace_back(name, tensor);
      continue;
    }
    absl::StatusOr<at::Tensor> gathered = group->GatherFull(*param, tensor);
    if (!gathered.ok()) return gathered.status();
    full.emplace_back(name, *std::move(gathered));
  }
  return full;
}

NamedTensors DataParallel::CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const {
  NamedTensors pieces;
  pieces.reserve(local.size());
  for (const auto& [name, tensor] : local) {
    const FsdpParamGroup* group = nullptr;
    const FsdpParamGroup::Param* param = ShardedParamOf(name, tensor, &group);
    if (param == nullptr) {
      pieces.emplace_back(name, tensor);
      continue;
    }
    std::vector<int64_t> offsets(tensor.dim(), 0);
    offsets[0] = group->FirstRowHeld(*param);
    boxes[name] = {param->full_shape, std::move(offsets)};
    pieces.emplace_back(name, tensor.narrow(0, 0, group->RowsHeld(*param)));
  }
  return pieces;
}

}  // namespace titan
