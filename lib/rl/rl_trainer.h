#ifndef TITAN_LIB_RL_RL_TRAINER_H_
#define TITAN_LIB_RL_RL_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/metrics/metrics_logger.h"
#include "lib/metrics/step_log.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/profiling/step_profiler.h"
#include "lib/rl/examples.h"
#include "lib/rl/generator.h"
#include "lib/rl/reward_model.h"
#include "lib/rl/rl_config.h"
#include "lib/rl/stop_tokens.h"
#include "lib/train/components.h"
#include "lib/train/grad_clip.h"
#include "lib/train/resource_monitor.h"
#include "lib/train/train_checkpoint.h"

namespace titan {

// This rank's share of one RL batch: prompts, sampled responses, rewards per response, and the
// generator's log-probabilities (undefined: recomputed by the trainer before the update).
struct Rollouts {
  std::vector<TokenIds> prompts;
  std::vector<TokenIds> responses;
  std::vector<double> rewards;
  at::Tensor generator_logprobs;  // float [B, T] in the layout of LayOutSequences
  double seconds = 0;  // spent making them (generation, scoring): the step's tps counts them too
};

// TitanRL: generation, reward scoring, the reference and the policy update in one runtime with
// one model code (lib/model's decoder), built from lib/train's components. The policy and its
// reference are [model]'s (FSDP/DDP as [parallelism] says); PPO's critic is a value head on the
// policy's trunk, saved beside the policy's checkpoints.
class RlTrainer {
 public:
  // `config` as RlJobConfig returns it. Builds every part and resumes from the newest checkpoint.
  // `mode` kTrain: Train() follows, so the run locks its folders (LockRunFolders) and logs
  // metrics, as kStepRolloutsSaved does (SaveAsNextStep follows Step); --generate and
  // --step_rollouts may read a running training's folder, and do not.
  // kGenerate reads only prompts (and answers) from the prompts files, whatever the algorithm, and
  // builds the policy alone: no reference, value head or reward model (kStepRollouts: no reward
  // model).
  static absl::StatusOr<std::unique_ptr<RlTrainer>> Create(const JobConfig& config,
                                                           const DistributedRuntime& runtime,
                                                           RlMode mode);
  ~RlTrainer();

  // The founding API: one update on this rank's rollouts (text; the chat template is applied to
  // prompts), one reward per response: [rl] ppo_epochs passes in minibatches. Returns the loss and
  // metrics of the step (sums over ranks); a collective with several ranks.
  // A rollout whose prompt (cut as generation cuts it) and response exceed [rl] max_seq_len is
  // refused: it is not cut, as its last token carries the reward its scorer gave the whole.
  // `where`, when given, names each rollout in errors (a file's path:line), else "Step: rollout i".
  // `logprobs`, when given, are the behaviour policy's log-probabilities of each response's tokens
  // (one per token, else an error), the old ones of [rl] old_logprobs = "generator"; without them
  // the trainer computes the old log-probabilities. A response's tokens are its `response_ids`
  // where given (the ids sampled: text need not encode back to them), else its text's encoding;
  // a prompt's tokens are its `prompt_ids` where given (those the response was sampled after, not
  // cut), else its text's with the chat template. Given ids past the model's vocabulary are
  // refused, as is an empty prompt (given or encoded): the response would follow no token.
  absl::StatusOr<StepMetrics> Step(const std::vector<std::string>& prompts,
                                   const std::vector<std::string>& responses,
                                   const std::vector<double>& rewards,
                                   const std::vector<std::string>& where = {},
                                   const std::vector<std::vector<double>>& logprobs = {},
                                   const std::vector<std::optional<TokenIds>>& response_ids = {},
                                   const std::vector<std::optional<TokenIds>>& prompt_ids = {});
  // The same on token ids, with the generator's log-probabilities when it has them. Rewards are
  // the scorer's: [rl] overlong_buffer_len's penalty is applied here, as in Train.
  absl::StatusOr<StepMetrics> StepOnRollouts(const Rollouts& rollouts);

  // Samples responses to `prompts` (text) with the policy, as [rl] says, seeded by `seed`. Logits
  // that are not finite (diverged weights) are an AbortedError naming where the weights came from.
  absl::StatusOr<Generation> Generate(const std::vector<std::string>& prompts,
                                      const SamplingOptions& options);
  SamplingOptions SamplingFromConfig(uint64_t seed, bool greedy) const;

  // The run: [training] steps of [rl] algorithm from the prompts (or task), with held-out
  // evaluations, rollouts.jsonl, metrics and checkpoints; SIGINT/SIGTERM stop after a step, or
  // at once while reward_command runs (a CancelledError: RunRl).
  absl::Status Train();

  // Mean held-out reward (RL: greedy responses), or preference accuracy (DPO), over this rank's
  // share of the held-out set, summed over ranks; 0 without one (Train logs nothing then).
  absl::StatusOr<double> Evaluate();

  // --step_rollouts --save_step, after Step's update `m`: the update becomes the run's next step,
  // logged to metrics.jsonl and saved whole (policy, optimizer, PPO's value head) as a training
  // step is, so that the next --step_rollouts, --generate or training run continues from it.
  // Returns the step's folder.
  absl::StatusOr<std::string> SaveAsNextStep(StepMetrics m);

  // The policy's whole weights as one safetensors file (rank 0 writes; a collective when
  // sharded).
  absl::Status SavePolicyWeights(const std::string& path);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<RlExample>& train_examples() const { return train_examples_; }
  const std::vector<RlExample>& eval_examples() const { return eval_examples_; }
  const TrainState& state() const { return state_; }
  // Where the policy's weights came from: the checkpoint step folder resumed, else [checkpoint]
  // initial_load_path (or hf_assets_path); "": a random initialisation.
  const std::string& weights_from() const { return weights_from_; }
  // Whether weights_from() is a resumed step holding model weights only (a last_save_model_only
  // export).
  bool resumed_model_only() const {
    return checkpointer_ != nullptr && checkpointer_->loaded_model_only();
  }
  // Random, the same on every rank of this run, new each run.
  const std::string& run_id() const { return setup_.run_id; }
  // [training] seed, or with -1 the seed the resumed step's run drew, else one this run drew.
  int64_t seed() const { return setup_.seed; }
  Decoder& policy() { return *policy_.model; }

 private:
  RlTrainer(const JobConfig& config, const DistributedRuntime& runtime);
  absl::Status Init(RlMode mode);
  // The policy's model as `setup` starts it (a resumed step's weights load later).
  absl::StatusOr<ModelBundle> BuildPolicy(const RunSetup& setup);
  // The weights of the step-0 seed checkpoint the run started from, into reference_.
  absl::Status LoadSeedCheckpointIntoReference();

  TokenIds EncodePrompt(const std::string& prompt) const;
  // OK unless `prompt` encodes to no tokens (empty, no chat template text and no BOS), when the
  // response would follow nothing; the error starts with `where`.
  absl::Status CheckPromptHasTokens(const std::string& prompt, absl::string_view where) const;
  TokenIds EncodeResponse(const std::string& response, bool add_eos) const;
  // SFT's and DPO's response cut to fit [rl] max_seq_len after `prompt`, keeping its start (TRL's
  // max_length truncation); `*cut` counts the responses cut.
  TokenIds FitResponse(const TokenIds& prompt, TokenIds response, int64_t* cut) const;
  // OK unless an id of `ids` (a row's `field`) is past the model's vocabulary; the error starts
  // with `where`.
  absl::Status CheckIdsInVocabulary(const TokenIds& ids, absl::string_view field,
                                    absl::string_view where) const;
  // OK when a rollout of these encoded lengths fits [rl] max_seq_len whole, else an error naming
  // it.
  absl::Status CheckRolloutFits(size_t prompt_tokens, size_t response_tokens) const;
  // Each response's text, without its stop token (what verifiers and scorers read) or with it as
  // the tokenizer spells it (what re-encodes to the ids the update trained on).
  absl::StatusOr<std::vector<std::string>> ResponseTexts(const Generation& generation,
                                                         bool with_stop_token) const;
  // `responses` are `generation`'s texts; a reward model reads its ids.
  absl::StatusOr<std::vector<double>> Rewards(const std::vector<std::string>& prompts,
                                              const std::vector<std::string>& responses,
                                              const std::vector<const RlExample*>& examples,
                                              const Generation& generation);
  // This rank's examples of step `step` (1-based), in an order fixed by the seed.
  std::vector<const RlExample*> StepExamples(int64_t step) const;

  // Forward of `batch` through the policy (or reference): response-token log-probabilities
  // [B, T] and, with the value head, values [B, T]; given `entropy`, each token's entropy.
  at::Tensor ResponseLogProbs(ModelBundle& model, const SequenceBatch& batch,
                              at::Tensor* values = nullptr, at::Tensor* entropy = nullptr);
  // The same without autograd, in microbatches of [training] local_batch_size rows as the
  // update's forwards: one forward of a whole batch would hold its [rows, T, vocab] logits.
  // Fails when gathering the model for them fails.
  absl::StatusOr<at::Tensor> ResponseLogProbsNoGrad(ModelBundle& model, const SequenceBatch& batch,
                                                    at::Tensor* values = nullptr,
                                                    at::Tensor* entropy = nullptr);
  absl::StatusOr<StepMetrics> RlUpdate(const Rollouts& rollouts);
  // <dump_folder>/config.toml, the run's configuration (rank 0 writes it).
  absl::Status WriteRunConfig() const;
  // Saves state_'s step: PPO's value head first, then the policy's.
  absl::Status SaveStep(bool model_only);
  // The rewards the update uses: the scorer's, less [rl] overlong_buffer_len's penalty.
  std::vector<double> OverlongPenalized(const Rollouts& rollouts) const;
  absl::StatusOr<StepMetrics> SftOrDpoStep(const std::vector<const RlExample*>& examples);
  // Sets `m`'s tps to `tokens` (this rank's) per second of `earlier_seconds` + `seconds`, and its
  // tflops and mfu to forward + backward passes over `trained_tokens` laid out `width` wide in
  // `seconds` (verl's perf/throughput and perf/mfu/actor).
  void SetThroughput(int64_t tokens, int64_t trained_tokens, int64_t width, double seconds,
                     double earlier_seconds, StepMetrics& m) const;
  // This step's scheduled learning rate ([optimizer] lr × the schedule), logged also on a step
  // whose every group dynamic sampling dropped (no optimizer step set it).
  double StepLr() const;
  // One optimizer step: `loss_sum(m)` is microbatch m's summed loss; `denominator` the step's
  // global normaliser (tokens, or pairs). Returns the gradient norm, on the device (unread).
  absl::StatusOr<at::Tensor> OptimizerStep(
      int64_t microbatches, const std::function<absl::StatusOr<at::Tensor>(int64_t)>& loss_sum,
      double denominator);
  // `values` reduced over the data-parallel ranks, as doubles on the host: one read and one
  // collective.
  absl::StatusOr<at::Tensor> ReduceOverDp(const at::Tensor& values, ReduceOp op) const;
  // Rank `rank`'s rollouts file: rollouts.jsonl (rank 0), rollouts_rank<r>.jsonl.
  std::string RolloutsPath(int rank) const;
  // Appends the step's rollouts to this rank's rollouts file; the responses with their stop
  // tokens, so that --step_rollouts on them replays the step.
  absl::Status WriteRollouts(const std::vector<const RlExample*>& examples,
                             const std::vector<double>& rewards, const Generation& generation);

  const JobConfig config_;
  const DistributedRuntime& runtime_;
  const JobConfig::Rl& rl_;
  RunSetup setup_;
  std::unique_ptr<Tokenizer> tokenizer_;
  StopTokens stop_tokens_;  // what every generation's responses end at
  ModelBundle policy_;
  std::optional<ModelBundle> reference_;       // kl_coef > 0, and DPO; never under --generate
  std::unique_ptr<RewardModel> reward_model_;  // reward = "reward_model", training runs only
  at::Tensor value_head_;  // PPO, but not under --generate: [1, dim] on the trunk
  std::vector<ParamRef> critic_params_;
  SquaredNormReducer grad_norm_reducer_;  // the policy's gradient norm over ranks; null: one rank
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Optimizer> critic_optimizer_;
  std::optional<WarmupStableDecaySchedule> schedule_;
  std::unique_ptr<TrainCheckpointer> checkpointer_;
  std::unique_ptr<TrainCheckpointer> critic_checkpointer_;
  DataParallel critic_data_parallel_;  // whole tensors: the value head is replicated
  FolderLocks folder_locks_;           // training runs: held while it lives
  std::unique_ptr<MetricsLogger> metrics_;  // null but in training runs
  // Training runs: this rank's RolloutsPath(), then on rank 0 those of ranks an earlier run on
  // more ranks had.
  std::vector<StepLog> rollouts_;
  std::unique_ptr<StepProfiler> profiler_;    // training runs with [profiling] on
  std::unique_ptr<ResourceMonitor> monitor_;  // training runs with [job] monitoring_interval
  std::vector<RlExample> train_examples_;
  std::vector<RlExample> eval_examples_;
  TrainState state_;
  std::string weights_from_;
  int64_t loaded_step_ = 0;  // state_.step once the weights were loaded: later ones are updates
  double peak_flops_ = 0;  // the device's datasheet peak in the matmuls' dtype; 0: unknown
};

// titan_rl's library call: builds an RlTrainer for `config` (RlJobConfig applied) and trains. A
// SIGINT/SIGTERM that killed the scorer ends the process with that signal, the step not saved.
absl::Status RunRl(const JobConfig& config, const DistributedRuntime& runtime);

}  // namespace titan

#endif  // TITAN_LIB_RL_RL_TRAINER_H_
