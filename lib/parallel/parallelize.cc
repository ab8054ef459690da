#include "lib/parallel/parallelize.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "lib/parallel/activation_checkpoint.h"
#include "lib/parallel/context_parallel.h"
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
  // Accepted, as torchtitan does, but a user asking for checkpointing should hear it did nothing.
  if (!layer_ids.empty() && std::none_of(policies.begin(), policies.end(),
                                         [](const auto& policy) { return policy.has_value(); })) {
    LOG(WARNING) << "[activation_checkpoint] selective_ac_option=" << every << " checkpoints every "
                 << every << "th layer: none of layers " << layer_ids.front() + 1 << ".."
                 << layer_ids.back() + 1 << " (counted from 1)";
  }
  return policies;
}

// What FSDP needs beyond the model: how blocks checkpoint, the policy, its groups, and the
// tensor-parallel slicing to apply to each group after its initialisation (null: none, or done).
struct FsdpSetup {
  LayerPolicies policies;
  std::string reshard_after_forward;
  bool pp_enabled = false;
  FsdpMixedPrecision mixed_precision;
  std::optional<at::TensorOptions> materialize;
  Communicator* shard = nullptr;
  Communicator* replicate = nullptr;
  TensorParallel* slice_after_init = nullptr;
  bool float8_all_gather = false;
  Communicator* tensor_parallel = nullptr;  // its weights are TP slices
};

// The weights of the linears a converter set (float8), for FSDP's float8 all-gather. A tied head
// is left out: its weight is the embedding table, which the lookup reads in high precision.
FsdpFloat8Params Float8GatheredWeights(Decoder& model, Communicator* tensor_parallel) {
  const std::vector<ParamRef> params = model.NamedParameters();
  FsdpFloat8Params float8;
  float8.tensor_parallel = tensor_parallel;
  for (const LinearRef& linear : model.NamedLinears()) {
    if (!*linear.fn) continue;
    const std::string weight = linear.name + ".weight";
    for (const ParamRef& param : params) {
      if (param.name == weight) float8.names.insert(weight);
    }
  }
  return float8;
}

absl::StatusOr<std::unique_ptr<DataParallel>> ApplyFsdp(Decoder& model, const FsdpSetup& setup) {
  const std::string& policy = setup.reshard_after_forward;
  if (policy != "default" && policy != "always" && policy != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("[parallelism] fsdp_reshard_after_forward: expected default, always or "
                     "never, got \"",
                     policy, "\""));
  }
  const FsdpFloat8Params float8 =
      setup.float8_all_gather ? Float8GatheredWeights(model, setup.tensor_parallel)
                              : FsdpFloat8Params();
  if (setup.float8_all_gather) {
    LOG(INFO) << "FSDP float8 all-gather: " << float8.names.size() << " weights travel as e4m3"
              << (setup.tensor_parallel != nullptr ? " (TP slices, whole-weight scales)" : "");
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
  if (setup.materialize) {
    Module::Materialize(root_params, *setup.materialize);
    model.InitEmbedding();
  }
  std::vector<std::unique_ptr<FsdpParamGroup>> groups;
  for (int64_t i = 0; i < num_layers; ++i) {
    if (setup.materialize) {
      Module::Materialize(layer_params[i], *setup.materialize);
      model.InitLayer(layer_ids[i]);
      if (setup.slice_after_init != nullptr)
        setup.slice_after_init->ShardParameters(layer_params[i]);
    }
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<FsdpParamGroup> group,
                           FsdpParamGroup::Create(layer_params[i], setup.shard, setup.replicate,
                                                  setup.mixed_precision, float8));
    groups.push_back(std::move(group));
  }
  // torchtitan: every block reshards unless pipeline parallel (each microbatch would gather again).
  const bool reshard = policy == "always" || (policy == "default" && !setup.pp_enabled);
  // Whether block i's parameters are gathered again in backward (so worth prefetching).
  auto gathers_in_backward = [&](int64_t i) { return reshard || setup.policies[i].has_value(); };
  for (int64_t i = 0; i < num_layers; ++i) {
    FsdpParamGroup* raw = groups[i].get();
    // Backward runs the blocks in reverse: the one before this is needed next.
    FsdpParamGroup* backward_next =
        i > 0 && gathers_in_backward(i - 1) ? groups[i - 1].get() : nullptr;
    // The next block's all-gather runs while this block computes.
    FsdpParamGroup* next = i + 1 < num_layers ? groups[i + 1].get() : nullptr;
    if (setup.policies[i]) {
      // Recomputation gathers again in backward and frees afterwards: resharding comes with it.
      // The forward (grad mode off inside the checkpoint) prefetches the next block; the
      // recomputation in backward (grad mode on) the block backward needs next.
      const RecomputePolicy recompute = *setup.policies[i];
      model.SetLayerWrapper(layer_ids[i], [raw, recompute, next, backward_next](
                                              const Decoder::LayerCall& call, const at::Tensor& x) {
        return CheckpointedCall(
            [raw, call, next, backward_next](const at::Tensor& y) {
              return raw->CallUnsharded(call, y, /*reshard_after_forward=*/false,
                                        c10::GradMode::is_enabled() ? backward_next : next);
            },
            x, recompute);
      });
    } else {
      model.SetLayerWrapper(layer_ids[i], [raw, reshard, next, backward_next](
                                              const Decoder::LayerCall& call, const at::Tensor& x) {
        return raw->CallUnsharded(call, x, reshard, next, backward_next);
      });
    }
  }
  if (setup.materialize) {
    model.InitHead();
    if (setup.slice_after_init != nullptr) setup.slice_after_init->ShardParameters(root_params);
  }
  FsdpParamGroup* root = nullptr;
  if (!root_params.empty()) {
    TITAN_ASSIGN_OR_RETURN(
        std::unique_ptr<FsdpParamGroup> group,
        FsdpParamGroup::Create(root_params, setup.shard, setup.replicate, setup.mixed_precision,
                               float8));
    root = group.get();
    groups.push_back(std::move(group));
  }
  // The head's backward runs first: the last block's gather starts with it.
  FsdpParamGroup* first_in_backward = num_layers > 0 && gathers_in_backward(num_layers - 1)
                                          ? groups[num_layers - 1].get()
                                          : nullptr;
  return std::make_unique<DataParallel>(std::move(groups), root, policy == "always",
                                        first_in_backward, setup.shard);
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
  if (dims.world_size() > 1 && comms == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", dims.world_size(), " without communicators"));
  }
  std::unique_ptr<TensorParallel> tensor_parallel;
  if (dims.tp_enabled()) {
    TITAN_ASSIGN_OR_RETURN(tensor_parallel, TensorParallel::Apply(model, options.tensor_parallel,
                                                                  &comms->Get(MeshGroup::kTp)));
    // A model still on the meta device is sliced group by group after FSDP initialises it.
    if (!options.materialize) tensor_parallel->ShardParameters(model.NamedParameters());
  }
  std::unique_ptr<ContextParallel> context_parallel;
  if (dims.cp_enabled()) {
    TITAN_ASSIGN_OR_RETURN(context_parallel, ContextParallel::Create(&comms->Get(MeshGroup::kCp),
                                                                     options.cp_load_balancer,
                                                                     options.cp_rotate_method));
    context_parallel->Apply(model);
  }
  std::unique_ptr<DataParallel> result;
  if (dims.fsdp_enabled()) {
    FsdpSetup setup;
    TITAN_ASSIGN_OR_RETURN(setup.policies, CheckpointPolicies(model.layer_ids(), options.ac_mode,
                                                              options.selective_ac_option));
    setup.reshard_after_forward = options.reshard_after_forward;
    setup.pp_enabled = dims.pp_enabled();
    setup.mixed_precision = options.fsdp_mixed_precision;
    setup.float8_all_gather = options.fsdp_float8_all_gather;
    setup.materialize = options.materialize;
    // Context-parallel ranks hold the same weights: FSDP shards over them too (torchtitan).
    setup.shard = &comms->Get(dims.cp_enabled() ? MeshGroup::kDpShardCp : MeshGroup::kDpShard);
    if (dims.dp_replicate_enabled()) setup.replicate = &comms->Get(MeshGroup::kDpReplicate);
    if (options.materialize) setup.slice_after_init = tensor_parallel.get();
    if (tensor_parallel != nullptr) setup.tensor_parallel = tensor_parallel->group();
    TITAN_ASSIGN_OR_RETURN(result, ApplyFsdp(model, setup));
  } else {
    if (options.materialize) {
      return absl::InvalidArgumentError(
          "ParallelizeDecoder: materialize is for FSDP; initialise the model before DDP or one "
          "process");
    }
    TITAN_RETURN_IF_ERROR(
        ApplyActivationCheckpointing(model, options.ac_mode, options.selective_ac_option));
    if (dims.dp_replicate_enabled()) {
      std::vector<at::Tensor> params;
      for (const ParamRef& param : model.NamedParameters()) params.push_back(*param.tensor);
      TITAN_ASSIGN_OR_RETURN(
          std::unique_ptr<DdpGradientReducer> ddp,
          DdpGradientReducer::Create(std::move(params), &comms->Get(MeshGroup::kDpReplicate)));
      result = std::make_unique<DataParallel>(std::move(ddp));
    } else {
      result = std::make_unique<DataParallel>();
    }
  }
  result->SetModelParallel(std::move(tensor_parallel), std::move(context_parallel));
  return result;
}

}  // namespace titan
