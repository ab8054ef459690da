#include "lib/parallel/parallelize.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/parallel/activation_checkpoint.h"
#include "lib/parallel/ddp.h"
#include "lib/parallel/fsdp.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// How activation checkpointing treats each layer (by position in the part); unset: not at all.
using LayerPolicies = std::vector<std::optional<RecomputePolicy>>;

absl::StatusOr<LayerPolicies> CheckpointPolicies(const std::vector<int64_t>& layer_ids,
                                                 const std::string& mode,
                                                 const std::string& selective_ac_option) {
  LayerPolicies policies(layer_ids.size());
  int64_t every = 0;
  if (mode == "none") return policies;
  if (mode == "full") {
    every = 1;
  } else if (mode == "selective") {
    if (selective_ac_option == "op") {
      for (auto& policy : policies) policy = RecomputePolicy::kCheapOpsOnly;
      return policies;
    }
    if (!absl::SimpleAtoi(selective_ac_option, &every) || every < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[activation_checkpoint] selective_ac_option: expected a positive integer N or \"op\", "
          "got \"",
          selective_ac_option, "\""));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "[activation_checkpoint] mode: expected none, selective or full, got \"", mode, "\""));
  }
  for (size_t i = 0; i < layer_ids.size(); ++i) {
    // torchtitan counts layers from 1 (global ids, so pipeline stages agree with one process).
    if ((layer_ids[i] + 1) % every == 0) policies[i] = RecomputePolicy::kEverything;
  }
  return policies;
}

absl::StatusOr<std::unique_ptr<DataParallel>> ApplyFsdp(
    Decoder& model, const LayerPolicies& policies, const std::string& reshard_after_forward,
    const FsdpMixedPrecision& mixed_precision, const std::optional<at::TensorOptions>& materialize,
    Communicator* shard, Communicator* replicate) {
  if (reshard_after_forward != "default" && reshard_after_forward != "always" &&
      reshard_after_forward != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("[parallelism] fsdp_reshard_after_forward: expected default, always or "
                     "never, got \"",
                     reshard_after_forward, "\""));
  }
  const std::vector<int64_t> layer_ids = model.layer_ids();
  const int64_t num_layers = static_cast<int64_t>(layer_ids.size());
  absl::flat_hash_map<int64_t, int64_t> position_of;
  for (int64_t i = 0; i < num_layers; ++i) position_of[layer_ids[i]] = i;
  std::vector<std::vector<ParamRef>> layer_params(num_layers);
  std::vector<ParamRef> root_params;
  for (const ParamRef& param : model.NamedParameters()) {
    // "layers.<id>.<...>" belongs to block id.
    const std::vector<std::string> parts = absl::StrSplit(param.name, absl::MaxSplits('.', 2));
    int64_t id = -1;
    if (parts.size() == 3 && parts[0] == "layers" && absl::SimpleAtoi(parts[1], &id) &&
        position_of.contains(id)) {
      layer_params[position_of[id]].push_back(param);
    } else {
      root_params.push_back(param);
    }
  }
  // Initialisation after sharding: the same order of random draws as Decoder::InitWeights.
  if (materialize) {
    Module::Materialize(root_params, *materialize);
    model.InitEmbedding();
  }
  std::vector<std::unique_ptr<FsdpParamGroup>> groups;
  for (int64_t i = 0; i < num_layers; ++i) {
    if (materialize) {
      Module::Materialize(layer_params[i], *materialize);
      model.InitLayer(layer_ids[i]);
    }
    TITAN_ASSIGN_OR_RETURN(
        std::unique_ptr<FsdpParamGroup> group,
        FsdpParamGroup::Create(layer_params[i], shard, replicate, mixed_precision));
    groups.push_back(std::move(group));
  }
  for (int64_t i = 0; i < num_layers; ++i) {
    // The last block is needed again first in backward: torchtitan keeps it gathered by default.
    const bool reshard = reshard_after_forward == "always" ||
                         (reshard_after_forward == "default" && i + 1 < num_layers);
    FsdpParamGroup* raw = groups[i].get();
    if (policies[i]) {
      // Recomputation gathers again in backward and frees afterwards: resharding comes with it.
      // No prefetch: the recomputation in backward would start one nobody uses.
      const RecomputePolicy policy = *policies[i];
      model.SetLayerWrapper(layer_ids[i], [raw, policy](const Decoder::LayerCall& call,
                                                        const at::Tensor& x) {
        return CheckpointedCall(
            [raw, call](const at::Tensor& y) { return raw->CallUnsharded(call, y); }, x, policy);
      });
    } else {
      // The next block's all-gather runs while this block computes.
      FsdpParamGroup* next = i + 1 < num_layers ? groups[i + 1].get() : nullptr;
      model.SetLayerWrapper(layer_ids[i], [raw, reshard, next](const Decoder::LayerCall& call,
                                                               const at::Tensor& x) {
        return raw->CallUnsharded(call, x, reshard, next);
      });
    }
  }
  if (materialize) model.InitHead();
  FsdpParamGroup* root = nullptr;
  if (!root_params.empty()) {
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<FsdpParamGroup> group,
                           FsdpParamGroup::Create(root_params, shard, replicate, mixed_precision));
    root = group.get();
    groups.push_back(std::move(group));
  }
  return std::make_unique<DataParallel>(std::move(groups), root, shard);
}

}  // namespace

absl::Status ApplyActivationCheckpointing(Decoder& model, const std::string& mode,
                                          const std::string& selective_ac_option) {
  const std::vector<int64_t> layer_ids = model.layer_ids();
  TITAN_ASSIGN_OR_RETURN(LayerPolicies policies,
                         CheckpointPolicies(layer_ids, mode, selective_ac_option));
  for (size_t i = 0; i < layer_ids.size(); ++i) {
    if (!policies[i]) continue;
    const RecomputePolicy policy = *policies[i];
    model.SetLayerWrapper(layer_ids[i],
                          [policy](const Decoder::LayerCall& call, const at::Tensor& x) {
                            return CheckpointedCall(call, x, policy);
                          });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataParallel>> ParallelizeDecoder(Decoder& model,
                                                                 const ParallelizeOptions& options,
                                                                 const ParallelDims& dims,
                                                                 const MeshCommunicators* comms) {
  if (dims.dp() > 1 && comms == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel degree ", dims.dp(), " without communicators"));
  }
  if (dims.dp_shard_enabled()) {
    TITAN_ASSIGN_OR_RETURN(
        LayerPolicies policies,
        CheckpointPolicies(model.layer_ids(), options.ac_mode, options.selective_ac_option));
    return ApplyFsdp(model, policies, options.reshard_after_forward, options.fsdp_mixed_precision,
                     options.materialize, &comms->Get(MeshGroup::kDpShard),
                     dims.dp_replicate_enabled() ? &comms->Get(MeshGroup::kDpReplicate) : nullptr);
  }
  if (options.materialize) {
    return absl::InvalidArgumentError(
        "ParallelizeDecoder: materialize is for FSDP; initialise the model before DDP or one "
        "process");
  }
  TITAN_RETURN_IF_ERROR(
      ApplyActivationCheckpointing(model, options.ac_mode, options.selective_ac_option));
  if (!dims.dp_replicate_enabled()) return std::make_unique<DataParallel>();
  std::vector<at::Tensor> params;
  for (const ParamRef& param : model.NamedParameters()) params.push_back(*param.tensor);
  TITAN_ASSIGN_OR_RETURN(
      std::unique_ptr<DdpGradientReducer> ddp,
      DdpGradientReducer::Create(std::move(params), &comms->Get(MeshGroup::kDpReplicate)));
  return std::make_unique<DataParallel>(std::move(ddp));
}

}  // namespace titan
