#include "models/llama3/parallelize.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/parallel/activation_checkpoint.h"
#include "lib/parallel/ddp.h"
#include "lib/parallel/fsdp.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Which layers activation checkpointing covers.
absl::StatusOr<std::vector<bool>> CheckpointedLayers(int64_t num_layers, const std::string& mode,
                                                     const std::string& selective_ac_option) {
  int64_t every = 0;
  if (mode == "none") return std::vector<bool>(num_layers, false);
  if (mode == "full") {
    every = 1;
  } else if (mode == "selective") {
    if (selective_ac_option == "op") {
      return absl::UnimplementedError(
          "[activation_checkpoint] selective_ac_option: \"op\" (per-op policy) is not supported by "
          "LibTorch's C++ autograd; use an integer N to checkpoint every Nth layer");
    }
    if (!absl::SimpleAtoi(selective_ac_option, &every) || every < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[activation_checkpoint] selective_ac_option: expected a positive integer N, got \"",
          selective_ac_option, "\""));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "[activation_checkpoint] mode: expected none, selective or full, got \"", mode, "\""));
  }
  std::vector<bool> checkpointed(num_layers);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    checkpointed[layer] = (layer + 1) % every == 0;  // torchtitan counts layers from 1
  }
  return checkpointed;
}

absl::StatusOr<std::unique_ptr<DataParallel>> ApplyFsdp(
    Llama3Model& model, const std::vector<bool>& checkpointed,
    const std::string& reshard_after_forward, const FsdpMixedPrecision& mixed_precision,
    const std::optional<at::TensorOptions>& materialize, Communicator* shard,
    Communicator* replicate) {
  if (reshard_after_forward != "default" && reshard_after_forward != "always" &&
      reshard_after_forward != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("[parallelism] fsdp_reshard_after_forward: expected default, always or "
                     "never, got \"",
                     reshard_after_forward, "\""));
  }
  const int64_t num_layers = model.num_layers();
  std::vector<std::vector<ParamRef>> layer_params(num_layers);
  std::vector<ParamRef> root_params;
  for (const ParamRef& param : model.NamedParameters()) {
    // "layers.<i>.<...>" belongs to block i.
    const std::vector<std::string> parts = absl::StrSplit(param.name, absl::MaxSplits('.', 2));
    int64_t layer = -1;
    if (parts.size() == 3 && parts[0] == "layers" && absl::SimpleAtoi(parts[1], &layer) &&
        layer >= 0 && layer < num_layers) {
      layer_params[layer].push_back(param);
    } else {
      root_params.push_back(param);
    }
  }
  // Initialisation after sharding: the same order of random draws as Llama3Model::InitWeights.
  if (materialize) {
    Module::Materialize(root_params, *materialize);
    model.InitEmbedding();
  }
  std::vector<std::unique_ptr<FsdpParamGroup>> groups;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    if (materialize) {
      Module::Materialize(layer_params[layer], *materialize);
      model.InitLayer(layer);
    }
    TITAN_ASSIGN_OR_RETURN(
        std::unique_ptr<FsdpParamGroup> group,
        FsdpParamGroup::Create(layer_params[layer], shard, replicate, mixed_precision));
    groups.push_back(std::move(group));
  }
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    // The last block is needed again first in backward: torchtitan keeps it gathered by default.
    const bool reshard = reshard_after_forward == "always" ||
                         (reshard_after_forward == "default" && layer + 1 < num_layers);
    FsdpParamGroup* raw = groups[layer].get();
    if (checkpointed[layer]) {
      // Recomputation gathers again in backward and frees afterwards: resharding comes with it.
      // No prefetch: the recomputation in backward would start one nobody uses.
      model.SetLayerWrapper(layer, [raw](const Llama3Model::LayerCall& call, const at::Tensor& x) {
        return CheckpointedCall(
            [raw, call](const at::Tensor& y) { return raw->CallUnsharded(call, y); }, x);
      });
    } else {
      // The next block's all-gather runs while this block computes.
      FsdpParamGroup* next = layer + 1 < num_layers ? groups[layer + 1].get() : nullptr;
      model.SetLayerWrapper(
          layer, [raw, reshard, next](const Llama3Model::LayerCall& call, const at::Tensor& x) {
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

absl::Status ApplyActivationCheckpointing(Llama3Model& model, const std::string& mode,
                                          const std::string& selective_ac_option) {
  TITAN_ASSIGN_OR_RETURN(std::vector<bool> checkpointed,
                         CheckpointedLayers(model.num_layers(), mode, selective_ac_option));
  for (int64_t layer = 0; layer < model.num_layers(); ++layer) {
    if (!checkpointed[layer]) continue;
    model.SetLayerWrapper(layer, [](const Llama3Model::LayerCall& call, const at::Tensor& x) {
      return CheckpointedCall(call, x);
    });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataParallel>> ParallelizeLlama3(Llama3Model& model,
                                                                const ParallelizeOptions& options,
                                                                const ParallelDims& dims,
                                                                const MeshCommunicators* comms) {
  if (dims.dp() > 1 && comms == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel degree ", dims.dp(), " without communicators"));
  }
  if (dims.dp_shard_enabled()) {
    TITAN_ASSIGN_OR_RETURN(
        std::vector<bool> checkpointed,
        CheckpointedLayers(model.num_layers(), options.ac_mode, options.selective_ac_option));
    return ApplyFsdp(model, checkpointed, options.reshard_after_forward,
                     options.fsdp_mixed_precision, options.materialize,
                     &comms->Get(MeshGroup::kDpShard),
                     dims.dp_replicate_enabled() ? &comms->Get(MeshGroup::kDpReplicate) : nullptr);
  }
  if (options.materialize) {
    return absl::InvalidArgumentError(
        "ParallelizeLlama3: materialize is for FSDP; initialise the model before DDP or one "
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
