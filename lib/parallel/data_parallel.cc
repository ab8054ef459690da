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

NamedTensors DataParallel::FullShaped(const NamedTensors& local) const {
  NamedTensors full;
  full.reserve(local.size());
  for (const auto& [name, tensor] : local) {
    const FsdpParamGroup* group = nullptr;
    const FsdpParamGroup::Param* param = ShardedParamOf(name, tensor, &group);
    full.emplace_back(name,
                      param == nullptr ? tensor : at::zeros(param->full_shape, tensor.options()));
  }
  return full;
}

absl::Status DataParallel::CopyShards(const NamedTensors& full, const NamedTensors& local) const {
  if (full.size() != local.size()) {
    return absl::InternalError(absl::StrCat("CopyShards: ", full.size(), " full tensors for ",
                                            local.size(), " local ones"));
  }
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < local.size(); ++i) {
    const FsdpParamGroup* group = nullptr;
    const FsdpParamGroup::Param* param = ShardedParamOf(local[i].first, local[i].second, &group);
    if (param == nullptr) {
      if (!full[i].second.is_same(local[i].second)) local[i].second.copy_(full[i].second);
      continue;
    }
    local[i].second.copy_(group->ShardOf(*param, full[i].second));
  }
  return absl::OkStatus();
}

}  // namespace titan
