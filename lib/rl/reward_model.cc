#include "lib/rl/reward_model.h"

#include <c10/core/GradMode.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/load_weights.h"
#include "lib/model/autocast.h"
#include "lib/model/op_cache.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"
#include "lib/util/torch_errors.h"

namespace titan {
namespace {

constexpr char kScoreName[] = "score.weight";

// A sequence-classification checkpoint seen as its trunk: every tensor but the
// score head.
class TrunkReader : public CheckpointReader {
public:
  explicit TrunkReader(std::unique_ptr<CheckpointReader> inner)
      : inner_(std::move(inner)) {
    format_ = inner_->format();
    directory_ = inner_->directory();
    description_ = inner_->description();
    for (const TensorInfo &tensor : inner_->tensors()) {
      if (tensor.name != kScoreName)
        tensors_.push_back(tensor);
    }
  }
  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    return inner_->Get(name);
  }
  absl::StatusOr<absl::string_view>
  Bytes(absl::string_view name) const override {
    return inner_->Bytes(name);
  }
  std::vector<std::string> Verify() const override { return inner_->Verify(); }
  const CheckpointReader &inner() const { return *inner_; }

private:
  std::unique_ptr<CheckpointReader> inner_;
};

} // namespace

absl::StatusOr<std::unique_ptr<RewardModel>>
RewardModel::Load(const std::string &path, const JobConfig &config,
                  const RunSetup &setup, const DistributedRuntime &runtime,
                  int64_t vocab_size) {
  const std::string source = absl::StrCat("[rl] reward_model_path: ", path);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> opened =
      CheckpointReader::Open(path, CheckpointFormat::kHf);
  // Its message names the file (a missing folder's config.json), not the key that led there.
  if (!opened.ok()) return WithContext(opened.status(), "[rl] reward_model_path");
  const TrunkReader reader(*std::move(opened));
  const nlohmann::json &hf_config = reader.description();
  const nlohmann::json architectures =
      hf_config.value("architectures", nlohmann::json::array());
  if (!architectures.is_array() || architectures.size() != 1 ||
      !architectures[0].is_string() ||
      !absl::EndsWith(architectures[0].get<std::string>(),
                      "ForSequenceClassification")) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, "/config.json: architectures = ", architectures.dump(),
        ", expected one *ForSequenceClassification (a trunk with a score "
        "head)"));
  }
  auto model = std::unique_ptr<RewardModel>(new RewardModel());
  TITAN_ASSIGN_OR_RETURN(model->info_, DescribeCheckpoint(reader, "", ""));
  // The trunk has no language-model head: tied, the decoder holds no output
  // weight to load.
  model->info_.args.tie_word_embeddings = true;
  const TransformerArgs &args = model->info_.args;
  const TensorInfo *score = reader.inner().Find(kScoreName);
  if (score == nullptr || score->shape != std::vector<int64_t>{1, args.dim}) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": expected score.weight [1, ", args.dim,
        "] (one label), found ",
        score == nullptr
            ? "none"
            : absl::StrCat("[", absl::StrJoin(score->shape, ", "), "]")));
  }
  if (args.vocab_size < vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": embeds ", args.vocab_size,
                     " ids, the policy's tokenizer has ", vocab_size,
                     " (scores read the policy's ids)"));
  }
  if (hf_config.contains("pad_token_id") &&
      hf_config["pad_token_id"].is_number_integer()) {
    model->pad_id_ = hf_config["pad_token_id"].get<int64_t>();
  }
  model->device_ = setup.device;
  model->autocast_dtype_ = setup.autocast_dtype;
  const at::TensorOptions options =
      at::TensorOptions().device(setup.device).dtype(at::kFloat);
  TITAN_RETURN_IF_ERROR(WithContext(
      CatchTorchErrors([&]() -> absl::Status {
        TransformerArgs run_args = args;
        run_args.max_seq_len = config.training().seq_len();
        model->trunk_ = model->info_.spec->Build(run_args, at::TensorOptions().device(at::kMeta));
        model->trunk_->Materialize(options);
        model->trunk_->BuildRopeTables(options);
        TITAN_RETURN_IF_ERROR(
            LoadModelWeights(reader, model->info_, model->trunk_->NamedParameters()));
        TITAN_ASSIGN_OR_RETURN(at::Tensor weight, reader.inner().Get(kScoreName));
        model->score_ = weight.to(options).clone();
        return absl::OkStatus();
      }),
      source));
  TITAN_ASSIGN_OR_RETURN(
      model->data_parallel_,
      model->info_.spec->parallelize(*model->trunk_,
                                     ModelParallelizeOptions(config, setup),
                                     runtime.dims(), runtime.comms()));
  for (const ParamRef &p : model->trunk_->NamedParameters())
    p.tensor->requires_grad_(false);
  LOG(INFO) << "reward model " << DescribeModelInfo(model->info_) << " from "
            << path;
  return model;
}

absl::StatusOr<std::vector<double>>
RewardModel::Score(const std::vector<TokenIds> &prompts,
                   const std::vector<TokenIds> &responses) {
  const SequenceBatch batch =
      LayOutSequences(prompts, responses, pad_id_.value_or(0), device_);
  // Column of each sequence's scored token in the left-padded layout.
  std::vector<int64_t> columns;
  for (size_t i = 0; i < prompts.size(); ++i) {
    TokenIds ids = prompts[i];
    ids.insert(ids.end(), responses[i].begin(), responses[i].end());
    int64_t last = static_cast<int64_t>(ids.size()) - 1;
    while (pad_id_ && last > 0 && ids[last] == *pad_id_)
      --last;
    // transformers' argmax over an all-pad row picks the first token.
    if (pad_id_ && ids[last] == *pad_id_)
      last = 0;
    columns.push_back(batch.prompt_len -
                      static_cast<int64_t>(prompts[i].size()) + last);
  }
  const auto score = [&]() -> absl::StatusOr<std::vector<double>> {
    c10::NoGradGuard no_grad;
    Decoder &trunk = *trunk_;
    const at::Tensor index = at::tensor(columns, at::kLong).to(device_);
    const AutocastScope autocast(device_.type(), autocast_dtype_);
    const at::Tensor scores = data_parallel_->Forward([&] {
      DecoderInputs inputs;
      inputs.positions = batch.positions;
      inputs.valid = batch.valid;
      const BatchContext context = trunk.PrepareBatch(
          batch.tokens.size(0), batch.tokens.size(1), inputs);
      const at::Tensor hidden =
          trunk.FinalNorm(trunk.RunLayers(trunk.Embed(batch.tokens), context));
      const at::Tensor rows = at::arange(hidden.size(0), index.options());
      // In the score head's dtype, outside autocast (which would run the linear in bf16); FSDP's
      // bf16 gathered weights leave the trunk's output bf16.
      const AutocastScope full_precision(device_.type(), std::nullopt);
      return Linear(hidden.index({rows, index}).to(score_.scalar_type()), score_)
          .squeeze(-1)
          .to(at::kDouble);
    });
    const at::Tensor cpu = scores.cpu().contiguous();
    return std::vector<double>(cpu.data_ptr<double>(),
                               cpu.data_ptr<double>() + cpu.numel());
  };
  absl::StatusOr<std::vector<double>> scored = CatchTorchErrors(score);
  if (!scored.ok()) return WithContext(scored.status(), "reward model");
  return scored;
}

} // namespace titan
