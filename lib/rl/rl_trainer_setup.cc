// RlTrainer's setup: the policy, its frozen reference, reward model, optimizers, checkpoints
// (resumed), metrics and examples. The steps and the run: rl_trainer.cc, rl_update.cc.
#include <ATen/ATen.h>  // before glog: LibTorch defines its own LOG, which hides glog's INFO lines

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/metrics/metrics_logger.h"
#include "lib/metrics/step_log.h"
#include "lib/rl/examples.h"
#include "lib/rl/rl_config.h"
#include "lib/rl/rl_trainer.h"
#include "lib/train/device.h"
#include "lib/train/train_checkpoint.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Training examples a bundled task generates (drawn with replacement from its finite space).
constexpr int64_t kTaskTrainExamples = 4096;

}  // namespace

absl::StatusOr<std::unique_ptr<RlTrainer>> RlTrainer::Create(const JobConfig& config,
                                                             const DistributedRuntime& runtime,
                                                             RlMode mode) {
  std::unique_ptr<RlTrainer> trainer(new RlTrainer(config, runtime));
  TITAN_RETURN_IF_ERROR(trainer->Init(mode));
  return trainer;
}

absl::StatusOr<ModelBundle> RlTrainer::BuildPolicy(const RunSetup& setup) {
  TITAN_ASSIGN_OR_RETURN(const ModelInfo info,
                         ResolveModel(config_, *tokenizer_, setup.resume_dir));
  // The same seed (or initial load) as the policy's start: the reference is its frozen copy.
  at::manual_seed(setup.seed);
  // RlJobConfig set [training] seq_len from [rl] max_seq_len: refusals name the key the user set.
  return BuildModel(config_, info, setup, runtime_, "[rl] max_seq_len");
}

absl::Status RlTrainer::LoadSeedCheckpointIntoReference() {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                         BuildCheckpointManager(config_, setup_, runtime_));
  CheckpointedParts parts{&reference_->params,
                          nullptr,
                          &reference_->sharded(),
                          nullptr,
                          &reference_->info,
                          reference_->num_params,
                          absl::StrCat("rl/", rl_.algorithm())};
  parts.read_only = true;
  parts.weights_only = true;
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<TrainCheckpointer> reader,
                         TrainCheckpointer::Create(config_, runtime_, std::move(manager), parts));
  TrainState unused;
  return reader->ResumeAt(0, unused);
}

absl::Status RlTrainer::Init(RlMode mode) {
  const bool training_run = mode == RlMode::kTrain;
  // Runs that add steps to the run's folder: training, and --step_rollouts --save_step.
  const bool writes_steps = training_run || mode == RlMode::kStepRolloutsSaved;
  LogJobStart(config_, runtime_);
  TITAN_ASSIGN_OR_RETURN(setup_, SetUpRun(config_, runtime_));
  if (writes_steps) {
    // (--generate and --step_rollouts, which take no lock, make the dump folder only once they
    // have weights to use: rl_modes.h.)
    TITAN_ASSIGN_OR_RETURN(folder_locks_, LockRunFolders(config_, runtime_));
    TITAN_RETURN_IF_ERROR(runtime_.StartCommTrace(setup_.run_id));
  }
  if (training_run) {
    // Only training draws prompts_per_step prompts a step; --generate and --step_rollouts split
    // their own inputs over the ranks.
    if (rl_.prompts_per_step() % setup_.dp_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("[rl] prompts_per_step = ", rl_.prompts_per_step(),
                       " must be a multiple of the data-parallel degree ", setup_.dp_size));
    }
  }
  TITAN_ASSIGN_OR_RETURN(tokenizer_, BuildTokenizer(config_));
  // Generation samples from the policy alone: a reference (a whole copy of the weights) or a
  // critic there would only take memory.
  const bool generate = mode == RlMode::kGenerate;
  const bool needs_reference =
      !generate &&
      ((rl_.kl_coef() > 0 && IsPolicyGradient(rl_.algorithm())) || rl_.algorithm() == "dpo");
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                         BuildCheckpointManager(config_, setup_, runtime_));
  ResumeChoice resume;
  // A step-0 seed checkpoint the run started from: its reference's weights at every resume, kept
  // also by a run without a reference (a later one may resume with one).
  std::string seed_checkpoint;
  if (manager != nullptr && PathExists(manager->StepDirectory(0))) {
    manager->set_kept_step(0);
    if (needs_reference) seed_checkpoint = manager->StepDirectory(0);
  }
  if (manager != nullptr) {
    TITAN_ASSIGN_OR_RETURN(resume, ChooseStepToResume(config_, runtime_, *manager, !writes_steps));
    TITAN_RETURN_IF_ERROR(AdoptRecordedSeed(config_, resume, setup_));
    setup_.resume_dir = resume.dir;
  }
  TITAN_ASSIGN_OR_RETURN(policy_, BuildPolicy(setup_));
  TITAN_ASSIGN_OR_RETURN(
      stop_tokens_,
      StopTokensOf(policy_.info, generate ? NoGenerationEos::kNoStop : NoGenerationEos::kModelEos));
  if (stop_tokens_.ids.empty()) {
    LOG(WARNING) << "generation stops at no id (" << stop_tokens_.source << ")";
  } else {
    LOG(INFO) << "generation stops at ids [" << absl::StrJoin(stop_tokens_.ids, ", ") << "] ("
              << stop_tokens_.source << ")";
  }
  if (needs_reference) {
    // Its parameters keep requires_grad as the policy's, though no optimizer holds them and it
    // only runs under NoGradGuard: with them frozen, LibTorch took other kernels somewhere (the
    // reference's log-probabilities differed from the identical policy's by up to 1e-5).
    // The run's starting weights (a step-0 seed checkpoint's, else initial_load_path's or the
    // seed's), also when it resumes.
    constexpr absl::string_view kReference = "the frozen reference (the run's starting weights)";
    RunSetup start = setup_;
    start.resume_dir = seed_checkpoint;
    absl::StatusOr<ModelBundle> reference = BuildPolicy(start);
    TITAN_RETURN_IF_ERROR(WithContext(reference.status(), kReference));
    reference_ = *std::move(reference);
    if (!seed_checkpoint.empty()) {
      TITAN_RETURN_IF_ERROR(WithContext(LoadSeedCheckpointIntoReference(), kReference));
    }
  }
  // Only training scores responses: --step_rollouts' rewards are given, --generate has none.
  if (rl_.reward() == "reward_model" && training_run) {
    TITAN_ASSIGN_OR_RETURN(reward_model_,
                           RewardModel::Load(rl_.reward_model_path(), config_, setup_, runtime_,
                                             tokenizer_->vocab_size()));
  }
  peak_flops_ = MatmulPeakFlops(setup_.device, setup_.autocast_dtype.has_value());
  TITAN_ASSIGN_OR_RETURN(optimizer_, BuildOptimizer(config_, policy_.params, runtime_));
  grad_norm_reducer_ = policy_.data_parallel->GradNormReducer(policy_.params);
  TITAN_ASSIGN_OR_RETURN(schedule_, BuildLrSchedule(config_));
  if (rl_.algorithm() == "ppo" && !generate) {
    // Zero: the critic starts predicting 0 for every state (TRL's value head starts near it).
    value_head_ = at::zeros({1, policy_.info.args.dim},
                            at::TensorOptions().device(setup_.device).dtype(at::kFloat))
                      .requires_grad_(true);
    critic_params_ = {{"value_head.weight", &value_head_}};
    JobConfig::Optimizer critic_optimizer = config_.optimizer();
    critic_optimizer.clear_param_groups();  // the policy's patterns name decoder parameters
    TITAN_ASSIGN_OR_RETURN(critic_optimizer_, Optimizer::Create(critic_params_, critic_optimizer));
  }
  if (manager != nullptr) {
    CheckpointedParts parts{
        &policy_.params, optimizer_.get(),   policy_.data_parallel.get(),         nullptr,
        &policy_.info,   policy_.num_params, absl::StrCat("rl/", rl_.algorithm())};
    // --generate and --step_rollouts read a training run's folder and must leave it as it is.
    parts.read_only = !writes_steps;
    parts.weights_only = generate;
    parts.seed = setup_.seed;
    TITAN_ASSIGN_OR_RETURN(checkpointer_,
                           TrainCheckpointer::Create(config_, runtime_, std::move(manager), parts));
    // Generation builds no critic (above).
    if (critic_optimizer_ != nullptr) {
      // The value head and its optimizer, step by step beside the policy's checkpoints.
      // One step more than the policy keeps: each critic step is saved (and pruned) before its
      // policy step, and must not take the critic of the oldest policy step still kept.
      TITAN_ASSIGN_OR_RETURN(
          std::unique_ptr<CheckpointManager> critic_manager,
          BuildCheckpointManager(config_, setup_, runtime_,
                                 CriticCheckpointFolder(config_.checkpoint().folder()), 1));
      CheckpointedParts critic{&critic_params_,
                               critic_optimizer_.get(),
                               &critic_data_parallel_,
                               nullptr,
                               &policy_.info,
                               0,
                               absl::StrCat("rl/", rl_.algorithm())};
      critic.read_only = !writes_steps;
      TITAN_ASSIGN_OR_RETURN(
          critic_checkpointer_,
          TrainCheckpointer::Create(config_, runtime_, std::move(critic_manager), critic));
    }
    // Only a step saved whole resumes: the policy's with the critic of exactly that step.
    TITAN_RETURN_IF_ERROR(
        checkpointer_->Resume(state_, std::move(resume), critic_checkpointer_.get()));
    if (critic_checkpointer_ != nullptr) {
      TrainState critic_state;
      TITAN_RETURN_IF_ERROR(
          critic_checkpointer_->ResumeAt(checkpointer_->loaded_step(), critic_state));
    }
    // A save killed before its cleanup left a step too many.
    TITAN_RETURN_IF_ERROR(checkpointer_->EnforceKeepLatest());
    if (critic_checkpointer_ != nullptr) {
      TITAN_RETURN_IF_ERROR(critic_checkpointer_->EnforceKeepLatest());
    }
  }
  loaded_step_ = state_.step;
  // A resumed step replaces the initial load.
  if (checkpointer_ != nullptr && !checkpointer_->loaded_dir().empty()) {
    weights_from_ = checkpointer_->loaded_dir();
  } else {
    TITAN_ASSIGN_OR_RETURN(weights_from_, InitialLoadPath(config_));
  }
  // Data: a bundled task's generated split, or JSONL.
  const uint64_t seed = static_cast<uint64_t>(setup_.seed);
  if (!rl_.task().empty()) {
    TITAN_ASSIGN_OR_RETURN(train_examples_,
                           MakeTaskExamples(rl_.task(), kTaskTrainExamples, seed, false));
    absl::StatusOr<std::vector<RlExample>> held_out =
        MakeTaskExamples(rl_.task(), rl_.eval_size(), seed + 1, true);
    TITAN_RETURN_IF_ERROR(
        WithContext(held_out.status(), absl::StrCat("[rl] eval_size = ", rl_.eval_size())));
    eval_examples_ = *std::move(held_out);
  }
  // Generation samples the responses: an SFT or DPO target is not needed there.
  const std::string fields = mode == RlMode::kGenerate ? "" : rl_.algorithm();
  // Errors name the key, then the file (and line).
  const auto read_examples = [&](const char* key, const std::string& path,
                                 std::vector<RlExample>& examples) -> absl::Status {
    absl::StatusOr<std::vector<RlExample>> read = ReadExamples(path, fields);
    TITAN_RETURN_IF_ERROR(WithContext(read.status(), absl::StrCat("[rl] ", key)));
    examples = *std::move(read);
    for (const RlExample& example : examples) {
      TITAN_RETURN_IF_ERROR(
          CheckPromptHasTokens(example.prompt, absl::StrCat("[rl] ", key, ": ", example.where)));
    }
    return absl::OkStatus();
  };
  if (!rl_.prompts_path().empty()) {
    TITAN_RETURN_IF_ERROR(read_examples("prompts_path", rl_.prompts_path(), train_examples_));
  }
  if (!rl_.eval_prompts_path().empty()) {
    TITAN_RETURN_IF_ERROR(
        read_examples("eval_prompts_path", rl_.eval_prompts_path(), eval_examples_));
  }
  if (training_run) {
    WarnProfilingWithoutEffectAfterResume(config_, runtime_, state_.step);
    // Last, after the data and before the metrics and rollouts files: a refused [profiling] key or
    // data file leaves none behind.
    TITAN_ASSIGN_OR_RETURN(profiler_, StepProfiler::Create(ProfilerOptionsFromConfig(
                                          config_, runtime_.rank(), setup_.device,
                                          runtime_.ProfilerDistributedInfo())));
    monitor_ = ResourceMonitor::FromConfig(config_, setup_.device);
  }
  if (writes_steps) {
    TITAN_ASSIGN_OR_RETURN(metrics_,
                           BuildResumedMetrics(config_, runtime_, setup_, checkpointer_.get()));
    // The rollouts files follow the run as metrics.jsonl does; rank 0 also takes the files of
    // ranks that an earlier run on more ranks had.
    const StepLogStart start = LogStart(checkpointer_.get(), setup_);
    std::vector<int> ranks = {runtime_.rank()};
    if (runtime_.rank() == 0) {
      const int world = runtime_.distributed() ? runtime_.dims().world_size() : 1;
      for (const int r : RanksIn(config_.job().dump_folder(), "rollouts_rank", ".jsonl")) {
        if (r >= world) ranks.push_back(r);
      }
    }
    for (const int r : ranks) {
      TITAN_ASSIGN_OR_RETURN(StepLog log, StepLog::Start(RolloutsPath(r), start));
      rollouts_.push_back(std::move(log));
    }
    if (checkpointer_ != nullptr) {
      checkpointer_->OnSetAside([this]() -> absl::Status {
        for (StepLog& log : rollouts_) TITAN_RETURN_IF_ERROR(log.Commit());
        return absl::OkStatus();
      });
    }
  }
  LOG(INFO) << "titan_rl " << rl_.algorithm() << ": " << train_examples_.size()
            << " training examples, " << eval_examples_.size() << " held out; policy "
            << policy_.info.name() << " (" << policy_.num_params << " parameters)"
            << (reference_ ? ", frozen reference" : "")
            << (value_head_.defined() ? ", value head" : "")
            << (reward_model_ ? ", reward model" : "");
  return absl::OkStatus();
}

}  // namespace titan
