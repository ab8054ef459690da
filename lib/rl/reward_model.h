#ifndef TITAN_LIB_RL_REWARD_MODEL_H_
#define TITAN_LIB_RL_REWARD_MODEL_H_

// A reward model: a Hugging Face *ForSequenceClassification checkpoint (a
// decoder trunk and a `score` head with one label), built through the model
// registry and scored in titan_rl's runtime, sharded as [parallelism] shards
// the policy.

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/model/decoder.h"
#include "lib/parallel/data_parallel.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/registry/model_spec.h"
#include "lib/rl/generator.h"
#include "lib/train/components.h"

namespace titan {

class RewardModel {
public:
  // Loads `path` (config.json with a *ForSequenceClassification architecture of
  // a registered family, safetensors with score.weight [1, dim]); the trunk
  // reads the family's HF adapter. Token ids are the policy's: the model must
  // embed `vocab_size` ids. Parallelized as `config` says ([parallelism],
  // [activation_checkpoint]); frozen. A collective with several ranks.
  static absl::StatusOr<std::unique_ptr<RewardModel>>
  Load(const std::string &path, const JobConfig &config, const RunSetup &setup,
       const DistributedRuntime &runtime, int64_t vocab_size);

  // One score per sequence prompt + response: the score head on the final-norm
  // hidden state of the rightmost token that is not config.json's pad_token_id
  // (transformers' convention; the last token when it has none). Every rank of
  // a sharded model must call it (any batch size).
  absl::StatusOr<std::vector<double>>
  Score(const std::vector<TokenIds> &prompts,
        const std::vector<TokenIds> &responses);

  const ModelInfo &info() const { return info_; }

private:
  RewardModel() = default;

  ModelInfo info_;
  std::optional<int64_t> pad_id_;
  at::Device device_{at::kCPU};
  std::optional<at::ScalarType> autocast_dtype_;  // the policy's mixed precision (GPUs)
  std::unique_ptr<Decoder> trunk_;
  std::unique_ptr<DataParallel> data_parallel_;
  at::Tensor score_; // [1, dim], replicated
};

} // namespace titan

#endif // TITAN_LIB_RL_REWARD_MODEL_H_
