#include "lib/train/trainer.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "lib/checkpoint/async_checkpoint_saver.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/directory.h"
#include "lib/checkpoint/rng_state.h"
#include "lib/config/job_config.h"
#include "lib/data/packed_text_dataset.h"
#include "lib/data/text_data_loader.h"
#include "lib/interop/convert.h"
#include "lib/interop/load_weights.h"
#include "lib/metrics/flops.h"
#include "lib/metrics/metrics_logger.h"
#include "lib/parallel/data_parallel.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "lib/train/device.h"
#include "lib/train/grad_clip.h"
#include "lib/train/lr_scheduler.h"
#include "lib/train/optimizer.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"
#include "models/llama3/model.h"
#include "models/llama3/parallelize.h"

namespace titan {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal = signal; }

at::Tensor ToTensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols,
                    const at::Device& device) {
  return at::tensor(values, at::kLong).view({rows, cols}).to(device);
}

// Mixed precision for the forward pass (LibTorch has no C++ autocast guard).
class AutocastScope {
 public:
  AutocastScope(const at::Device& device, std::optional<at::ScalarType> dtype)
      : device_type_(device.type()), enabled_(dtype.has_value()) {
    if (!enabled_) return;
    at::autocast::set_autocast_dtype(device_type_, *dtype);
    at::autocast::set_autocast_enabled(device_type_, true);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(device_type_, false);
    at::autocast::clear_cache();
  }

 private:
  at::DeviceType device_type_;
  bool enabled_;
};

class Trainer {
 public:
  Trainer(const JobConfig& config, const DistributedRuntime& runtime)
      : config_(config), runtime_(runtime) {}

  absl::Status Init();
  absl::Status Train();

 private:
  struct StepStats {
    double loss = 0;
    double grad_norm = 0;
    double lr = 0;
    int64_t tokens = 0;
  };

  absl::StatusOr<StepStats> TrainStep();
  absl::StatusOr<double> Validate();
  absl::Status Save(bool model_only);
  // [checkpoint] last_save_in_hf: `model` (whole tensors) as a Hugging Face directory beside the
  // step, <checkpoint folder>/step-<N>-hf.
  absl::Status ExportHf(const NamedTensors& model) const;
  // The model's shape and special tokens, as checkpoints and exports describe it.
  Llama3ModelInfo ModelInfo() const {
    return {args_, config_.model().flavor(), tokenizer_->bos_id(), tokenizer_->eos_id()};
  }
  // Waits for an asynchronous save in flight and agrees with the other ranks on its outcome.
  absl::Status FinishPendingSave();
  absl::Status MaybeResume();
  NamedTensors ModelState();
  // What this rank saves of `local`: its pieces in the first replica group, whole tensors on rank
  // 0.
  NamedTensors PiecesToSave(const NamedTensors& local, TensorBoxes& boxes) const;
  bool autocast() const { return autocast_dtype_.has_value(); }
  bool writer() const { return runtime_.rank() == 0; }
  // Sums `value` over the data-parallel ranks.
  absl::StatusOr<double> SumOverDp(double value) const;
  // The stop signal, once any rank has one, so that every rank stops after the same step.
  absl::StatusOr<int> AgreedStopSignal() const;
  void LogStateMemory() const;

  const JobConfig config_;
  const DistributedRuntime& runtime_;
  int dp_rank_ = 0;
  int dp_size_ = 1;
  at::Device device_{at::kCPU};
  std::optional<at::ScalarType> autocast_dtype_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Llama3Args args_;
  std::unique_ptr<Llama3Model> model_;
  std::unique_ptr<DataParallel> data_parallel_;
  std::vector<ParamRef> params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<WarmupStableDecaySchedule> schedule_;
  std::unique_ptr<TextDataLoader> train_loader_;
  std::unique_ptr<CheckpointManager> checkpointer_;
  std::unique_ptr<AsyncCheckpointSaver> async_saver_;  // Set with [checkpoint] async_mode=async.
  std::unique_ptr<MetricsLogger> metrics_;
  int64_t step_ = 0;  // completed optimizer steps
  int64_t microbatches_ = 1;
  int64_t ntokens_seen_ = 0;
  int64_t flops_per_token_ = 0;
  double peak_flops_ = 0;
};

absl::Status Trainer::Init() {
  const auto& training = config_.training();
  const auto& job = config_.job();
  TITAN_RETURN_IF_ERROR(MakeDirectories(job.dump_folder()));
  if (writer()) {
    TITAN_RETURN_IF_ERROR(
        WriteFileAtomically(job.dump_folder() + "/config.toml", JobConfigToToml(config_)));
  }
  if (runtime_.distributed()) {
    dp_rank_ = runtime_.comm(MeshGroup::kDp).rank();
    dp_size_ = runtime_.comm(MeshGroup::kDp).size();
    // Ranks sharing a host split its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
    const int local = std::max(1, runtime_.env().local_world_size);
    at::set_num_threads(std::max<int>(1, std::thread::hardware_concurrency() / local));
  }

  // Every rank initialises the same weights: a random seed is rank 0's. So is the run id that
  // names this run's temporary checkpoint directories.
  std::random_device random;
  at::Tensor seed_and_run = at::full({2}, training.seed(), at::kLong);
  if (training.seed() < 0) seed_and_run[0].fill_(static_cast<int64_t>(random() >> 1));
  seed_and_run[1].fill_((static_cast<int64_t>(random()) << 31) ^ random());
  if (runtime_.distributed()) {
    TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kWorld).Broadcast(seed_and_run, 0)));
  }
  at::manual_seed(seed_and_run[0].item<int64_t>());
  if (training.deterministic()) at::globalContext().setDeterministicAlgorithms(true, false);

  device_ = PickDevice(runtime_.env().local_rank);
  const std::string& mp = training.mixed_precision_param();
  if (device_.is_cuda() && (mp == "bfloat16" || mp == "float16")) {
    autocast_dtype_ = mp == "bfloat16" ? at::kBFloat16 : at::kHalf;
  }
  LOG(INFO) << "device " << DeviceName(device_) << ", compute dtype "
            << (autocast() ? mp : std::string("float32"))
            << (device_.is_cpu() && mp != "float32" ? " (mixed precision is GPU-only)" : "");

  TITAN_ASSIGN_OR_RETURN(tokenizer_, LoadTokenizer(config_.model().tokenizer_path()));

  TITAN_ASSIGN_OR_RETURN(Llama3Args args, Llama3Flavor(config_.model().flavor()));
  if (config_.model().flavor() == "debugmodel") args.vocab_size = tokenizer_->vocab_size();
  if (tokenizer_->vocab_size() > args.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[model] tokenizer_path: tokenizer has ", tokenizer_->vocab_size(), " ids but flavor ",
        config_.model().flavor(), " embeds only ", args.vocab_size));
  }
  args.max_seq_len = std::max(training.seq_len(), config_.validation().seq_len());
  args_ = args;
  model_ = std::make_unique<Llama3Model>(args, at::TensorOptions().device(at::kMeta));
  const auto& ckpt = config_.checkpoint();
  const at::TensorOptions param_options = at::TensorOptions().device(device_).dtype(at::kFloat);
  // Under FSDP the parallelize step initialises one group at a time and keeps only its shards (the
  // same weights as one process with the same seed). An initial load reads whole tensors, so it
  // needs the whole model first.
  const bool init_after_sharding =
      runtime_.dims().dp_shard_enabled() && ckpt.initial_load_path().empty();
  if (!init_after_sharding) {
    model_->Materialize(param_options);
    model_->InitWeights();
  }
  if (!ckpt.initial_load_path().empty()) {
    if (!ckpt.initial_load_model_only()) {
      return absl::UnimplementedError(
          "[checkpoint] initial_load_model_only=false: initial loads take model weights only; "
          "resume a full run through [checkpoint] folder instead");
    }
    // Before sharding: every rank loads the full weights and keeps its shard. A checkpoint in
    // [checkpoint] folder, if any, still takes precedence when resuming below.
    TITAN_RETURN_IF_ERROR(LoadLlama3Weights(ckpt.initial_load_path(), ckpt.initial_load_in_hf(),
                                            args, model_->NamedParameters()));
    LOG(INFO) << "initial weights from " << ckpt.initial_load_path();
  }
  const int64_t n_params = model_->NumParameters();
  ParallelizeOptions parallelize;
  parallelize.ac_mode = config_.activation_checkpoint().mode();
  parallelize.selective_ac_option = config_.activation_checkpoint().selective_ac_option();
  parallelize.reshard_after_forward = config_.parallelism().fsdp_reshard_after_forward();
  if (init_after_sharding) parallelize.materialize = param_options;
  if (autocast()) {
    // FSDP gathers parameters in the compute dtype (half the all-gather bytes); gradients are
    // reduced in [training] mixed_precision_reduce.
    parallelize.fsdp_mixed_precision = {*autocast_dtype_, at::kFloat};
  }
  TITAN_ASSIGN_OR_RETURN(
      data_parallel_, ParallelizeLlama3(*model_, parallelize, runtime_.dims(), runtime_.comms()));
  params_ = model_->NamedParameters();
  flops_per_token_ = NumFlopsPerToken({n_params, args.vocab_size * args.dim, args.n_layers,
                                       args.n_heads, args.head_dim(), training.seq_len()});
  peak_flops_ =
      PeakFlops(DeviceName(device_), autocast() ? MatmulDtype::kBfloat16 : MatmulDtype::kFloat32);
  LOG(INFO) << "model llama3 " << config_.model().flavor() << ": " << n_params
            << " parameters, vocab " << args.vocab_size;
  if (runtime_.distributed()) {
    const ParallelDims& dims = runtime_.dims();
    LOG(INFO) << "rank " << runtime_.rank() << " of " << dims.world_size() << ": data parallel "
              << (dims.dp_shard_enabled() ? (dims.dp_replicate_enabled() ? "HSDP" : "FSDP")
                                          : (dims.dp_replicate_enabled() ? "DDP" : "off"))
              << " (replicate " << dims.dp_replicate() << " x shard " << dims.dp_shard()
              << "), dp rank " << dp_rank_ << " of " << dp_size_;
  }

  TITAN_ASSIGN_OR_RETURN(optimizer_, Optimizer::Create(params_, config_.optimizer()));
  const auto& lr = config_.lr_scheduler();
  TITAN_ASSIGN_OR_RETURN(schedule_, WarmupStableDecaySchedule::Create(
                                        training.steps(), lr.warmup_steps(), lr.decay_ratio(),
                                        lr.decay_type(), lr.min_lr_factor()));

  const int64_t global_batch =
      training.global_batch_size() > 0 ? training.global_batch_size() : training.local_batch_size();
  microbatches_ = std::max<int64_t>(1, global_batch / (training.local_batch_size() * dp_size_));

  TextDatasetOptions data;
  data.path = training.dataset_path();
  data.text_field = training.dataset_text_field();
  data.seq_len = training.seq_len();
  data.dp_rank = dp_rank_;
  data.dp_world_size = dp_size_;
  TITAN_ASSIGN_OR_RETURN(auto dataset, PackedTextDataset::Open(data, tokenizer_.get()));
  train_loader_ = std::make_unique<TextDataLoader>(std::move(dataset));

  if (ckpt.enable()) {
    CheckpointRanks ranks;
    ranks.rank = runtime_.rank();
    ranks.world_size = runtime_.dims().world_size();
    ranks.run_id = absl::StrCat(seed_and_run[1].item<int64_t>());
    ranks.commit_timeout = absl::Seconds(config_.comm().train_timeout_seconds());
    checkpointer_ = std::make_unique<CheckpointManager>(job.dump_folder() + "/" + ckpt.folder(),
                                                        ckpt.keep_latest_k(), ranks);
    if (ckpt.async_mode() == "async") {
      async_saver_ = std::make_unique<AsyncCheckpointSaver>(checkpointer_.get());
    }
    TITAN_RETURN_IF_ERROR(MaybeResume());
  }
  MetricsLoggerOptions metrics;
  metrics.dump_folder = job.dump_folder();
  if (config_.metrics().enable_tensorboard()) {
    metrics.tensorboard_folder = job.dump_folder() + "/" + config_.metrics().save_tb_folder();
  }
  metrics.disable_color_printing = config_.metrics().disable_color_printing();
  if (writer()) {
    TITAN_ASSIGN_OR_RETURN(metrics_, MetricsLogger::Create(metrics));
  }
  return absl::OkStatus();
}

NamedTensors Trainer::ModelState() {
  NamedTensors state;
  for (const ParamRef& p : params_) state.emplace_back(p.name, p.tensor->detach());
  return state;
}

absl::Status Trainer::MaybeResume() {
  int64_t step = config_.checkpoint().load_step();
  if (step < 0) {
    absl::StatusOr<int64_t> latest = checkpointer_->LatestStep();
    if (absl::IsNotFound(latest.status())) return absl::OkStatus();
    TITAN_RETURN_IF_ERROR(latest.status());
    step = *latest;
  }
  // The optimizer's zero state gives LoadInto tensors of the right shapes to fill in place. Each
  // rank reads the rows it holds from whichever saved pieces overlap them, so a checkpoint loads
  // under any data-parallel layout.
  optimizer_->InitState();
  NamedTensors optimizer_state = optimizer_->StateDict();
  TensorBoxes boxes;
  const NamedTensors model_pieces = data_parallel_->CheckpointPieces(ModelState(), boxes);
  const NamedTensors optimizer_pieces = data_parallel_->CheckpointPieces(optimizer_state, boxes);
  nlohmann::json extra;
  const absl::Status full =
      checkpointer_->LoadInto(step, model_pieces, &optimizer_pieces, &extra, boxes);
  if (absl::IsFailedPrecondition(full)) {  // a model-only checkpoint: weights, then step 0
    TITAN_RETURN_IF_ERROR(checkpointer_->LoadInto(step, model_pieces, nullptr, nullptr, boxes));
    LOG(INFO) << "loaded model weights from step-" << step << " (model only); training starts at 0";
    return absl::OkStatus();
  }
  TITAN_RETURN_IF_ERROR(full);
  TITAN_RETURN_IF_ERROR(optimizer_->LoadStateDict(optimizer_state));
  TITAN_RETURN_IF_ERROR(train_loader_->LoadStateDict(extra.at("dataloader")));
  step_ = extra.at("train_state").at("step").get<int64_t>();
  ntokens_seen_ = extra.at("train_state").at("ntokens_seen").get<int64_t>();
  TITAN_RETURN_IF_ERROR(RestoreRngState(extra.at("rng")));
  LOG(INFO) << "resumed from checkpoint step-" << step;
  return absl::OkStatus();
}

NamedTensors Trainer::PiecesToSave(const NamedTensors& local, TensorBoxes& boxes) const {
  const bool first_replica =
      !runtime_.distributed() || runtime_.comm(MeshGroup::kDpReplicate).rank() == 0;
  NamedTensors kept;
  for (auto& [name, tensor] : data_parallel_->CheckpointPieces(local, boxes)) {
    if (boxes.count(name) > 0 ? first_replica : writer()) kept.emplace_back(name, tensor);
  }
  return kept;
}

absl::Status Trainer::FinishPendingSave() {
  if (async_saver_ == nullptr || !async_saver_->in_flight()) return absl::OkStatus();
  const absl::Status saved = async_saver_->Wait();
  TITAN_ASSIGN_OR_RETURN(const bool all_saved, runtime_.AllAgree(saved.ok()));
  TITAN_RETURN_IF_ERROR(saved);
  if (!all_saved) return absl::InternalError("another rank failed to write its checkpoint part");
  return absl::OkStatus();
}

absl::Status Trainer::Save(bool model_only) {
  TITAN_RETURN_IF_ERROR(FinishPendingSave());
  CheckpointState state;
  absl::Status exported;
  if (model_only) {
    // A consolidated export: whole tensors, gathered and written by rank 0 in [checkpoint]
    // export_dtype.
    TITAN_ASSIGN_OR_RETURN(NamedTensors full, data_parallel_->GatherFull(ModelState()));
    const std::string& dtype = config_.checkpoint().export_dtype();
    const at::ScalarType export_type = dtype == "bfloat16"  ? at::kBFloat16
                                       : dtype == "float16" ? at::kHalf
                                                            : at::kFloat;
    if (writer()) {
      for (auto& [name, tensor] : full) state.model.emplace_back(name, tensor.to(export_type));
      if (config_.checkpoint().last_save_in_hf()) exported = ExportHf(state.model);
    }
  } else {
    // Every rank writes its own shards, in parallel (CheckpointManager joins them on load).
    state.model = PiecesToSave(ModelState(), state.boxes);
    state.optimizer = PiecesToSave(optimizer_->StateDict(), state.boxes);
    state.extra["dataloader"] = train_loader_->StateDict();
    state.extra["train_state"] = {{"step", step_}, {"ntokens_seen", ntokens_seen_}};
    state.extra["lr_scheduler"] = {{"last_step", step_}};
    state.extra["rng"] = CaptureRngState();
  }
  // A failed export skips the save; the agreement below (on every rank's single one for this
  // save) still tells the other ranks.
  // The shape travels with the weights, so convert_checkpoint and checkpoint_inspect need no
  // flavor.
  state.extra["model"] = Llama3ModelInfoToJson(ModelInfo());
  if (async_saver_ != nullptr && exported.ok()) {
    return async_saver_->Start(step_, state, model_only);
  }
  // CheckpointManager logs the save (path, tensors, bytes, seconds).
  const absl::Status saved =
      exported.ok() ? checkpointer_->Save(step_, state, model_only) : exported;
  // Also a barrier: no rank runs ahead (or resumes) before the step is committed.
  TITAN_ASSIGN_OR_RETURN(const bool all_saved, runtime_.AllAgree(saved.ok()));
  TITAN_RETURN_IF_ERROR(saved);
  if (!all_saved)
    return absl::InternalError(absl::StrCat("another rank failed to save step-", step_));
  return absl::OkStatus();
}

absl::Status Trainer::ExportHf(const NamedTensors& model) const {
  HfExportOptions options;
  const std::string& tokenizer = config_.model().tokenizer_path();
  if (PathExists(tokenizer + "/tokenizer.json") || PathExists(tokenizer + "/tokenizer.model")) {
    options.tokenizer_dir = tokenizer;  // transformers loads the export with its tokenizer.
  }
  const std::string dir = checkpointer_->StepDirectory(step_) + "-hf";
  // An export of this same step by an earlier run of the job is replaced.
  TITAN_RETURN_IF_ERROR(RemoveTree(dir));
  TITAN_RETURN_IF_ERROR(
      SaveLlama3Hf(model, ModelInfo(), model.front().second.scalar_type(), dir, options));
  LOG(INFO) << "exported Hugging Face weights to " << dir;
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepStats> Trainer::TrainStep() {
  const auto& training = config_.training();
  StepStats stats;
  optimizer_->ZeroGrad();
  for (int64_t m = 0; m < microbatches_; ++m) {
    TITAN_ASSIGN_OR_RETURN(TokenBatch batch, train_loader_->NextBatch(training.local_batch_size()));
    at::Tensor inputs = ToTensor(batch.inputs, batch.batch_size, batch.seq_len, device_);
    at::Tensor labels = ToTensor(batch.labels, batch.batch_size, batch.seq_len, device_);
    at::Tensor logits;
    {
      AutocastScope autocast_scope(device_, autocast_dtype_);
      logits = data_parallel_->Forward([&] { return model_->Forward(inputs); });
    }
    // Mean over this microbatch's tokens, scaled so the accumulated gradient is the global mean
    // (data parallelism then averages over ranks, which all hold the same number of tokens).
    at::Tensor loss =
        at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten()) /
        static_cast<double>(microbatches_);
    data_parallel_->BeginBackward(/*last_microbatch=*/m + 1 == microbatches_);
    loss.backward();
    stats.loss += loss.item<double>();
    stats.tokens += batch.batch_size * batch.seq_len;
  }
  TITAN_RETURN_IF_ERROR(data_parallel_->FinishBackward());
  TITAN_ASSIGN_OR_RETURN(stats.loss, SumOverDp(stats.loss));
  stats.loss /= dp_size_;
  std::vector<at::Tensor> tensors;
  for (const ParamRef& p : params_) tensors.push_back(*p.tensor);
  stats.grad_norm =
      ClipGradNorm(tensors, training.max_norm(), data_parallel_->GradNormReducer()).item<double>();
  optimizer_->SetLrFactor(schedule_->Factor(step_));
  stats.lr = optimizer_->lr();
  optimizer_->Step();
  ++step_;
  ntokens_seen_ += stats.tokens;
  return stats;
}

absl::StatusOr<double> Trainer::SumOverDp(double value) const {
  if (dp_size_ == 1) return value;
  at::Tensor sum = at::full({1}, value, at::kDouble);
  TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kDp).AllReduce(sum, ReduceOp::kSum)));
  return sum.item<double>();
}

absl::StatusOr<int> Trainer::AgreedStopSignal() const {
  if (!runtime_.distributed()) return g_stop_signal.load();
  at::Tensor signal = at::full({1}, g_stop_signal.load(), at::kLong);
  TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kWorld).AllReduce(signal, ReduceOp::kMax)));
  return static_cast<int>(signal.item<int64_t>());
}

void Trainer::LogStateMemory() const {
  int64_t param_bytes = 0;
  for (const ParamRef& p : params_) param_bytes += p.tensor->nbytes();
  int64_t optimizer_bytes = 0;
  for (const auto& [name, tensor] : optimizer_->StateDict()) optimizer_bytes += tensor.nbytes();
  LOG(INFO) << "rank " << runtime_.rank() << " state memory: parameters " << param_bytes
            << " B + optimizer " << optimizer_bytes << " B = " << param_bytes + optimizer_bytes
            << " B";
}

absl::StatusOr<double> Trainer::Validate() {
  const auto& v = config_.validation();
  TextDatasetOptions data;
  data.path = v.dataset_path();
  data.text_field = config_.training().dataset_text_field();
  data.seq_len = v.seq_len();
  data.infinite = false;
  TITAN_ASSIGN_OR_RETURN(auto dataset, PackedTextDataset::Open(data, tokenizer_.get()));
  TextDataLoader loader(std::move(dataset));
  // Every rank evaluates the whole set (alike): sharded ranks must run the same forwards anyway.
  c10::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t batches = 0;
  while (v.steps() < 0 || batches < v.steps()) {
    absl::StatusOr<TokenBatch> batch = loader.NextBatch(v.local_batch_size());
    if (absl::IsOutOfRange(batch.status()) || absl::IsNotFound(batch.status())) break;
    TITAN_RETURN_IF_ERROR(batch.status());
    at::Tensor inputs = ToTensor(batch->inputs, batch->batch_size, batch->seq_len, device_);
    at::Tensor labels = ToTensor(batch->labels, batch->batch_size, batch->seq_len, device_);
    at::Tensor logits = data_parallel_->Forward([&] { return model_->Forward(inputs); });
    loss_sum += at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), labels.flatten())
                    .item<double>();
    ++batches;
  }
  if (batches == 0) {
    return absl::InvalidArgumentError(absl::StrCat("[validation] dataset_path: ", v.dataset_path(),
                                                   " holds less than one batch"));
  }
  return loss_sum / batches;
}

absl::Status Trainer::Train() {
  const auto& training = config_.training();
  const auto& ckpt = config_.checkpoint();
  g_stop_signal = 0;
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  if (step_ >= training.steps()) {
    LOG(INFO) << "checkpoint is at step " << step_ << " >= [training] steps " << training.steps()
              << "; nothing to train";
    return absl::OkStatus();
  }
  LOG(INFO) << "training from step " << step_ + 1 << " to " << training.steps() << ", "
            << microbatches_ << " microbatch(es) of " << training.local_batch_size() << " x "
            << training.seq_len() << " tokens per step";
  Stopwatch stopwatch;
  int64_t window_tokens = 0;
  while (step_ < training.steps()) {
    TITAN_ASSIGN_OR_RETURN(StepStats stats, TrainStep());
    window_tokens += stats.tokens;
    const bool last = step_ == training.steps();
    const bool validate =
        config_.validation().enable() && (step_ % config_.validation().freq() == 0 || last);
    if (step_ == 1 || step_ % config_.metrics().log_freq() == 0 || last || validate) {
      const Throughput throughput =
          ComputeThroughput(window_tokens, stopwatch.Lap(), flops_per_token_, peak_flops_);
      StepMetrics m;
      m.step = step_;
      m.loss = stats.loss;
      m.grad_norm = stats.grad_norm;
      m.lr = stats.lr;
      m.tps = throughput.tokens_per_second;
      m.tflops = throughput.tflops;
      m.mfu = throughput.mfu_percent;
      m.memory_gib = PeakMemoryGiB(device_);
      if (validate) {
        TITAN_ASSIGN_OR_RETURN(m.validation_loss, Validate());
        stopwatch.Lap();  // validation time is not training throughput
      }
      if (metrics_ != nullptr) {
        TITAN_RETURN_IF_ERROR(metrics_->Log(m));
      } else {
        LOG(INFO) << FormatStepLine(m, /*color=*/false);
      }
      window_tokens = 0;
    }
    if (step_ == 1) {
      runtime_.SetTimeout(absl::Seconds(config_.comm().train_timeout_seconds()));
      LogStateMemory();
    }
    if (checkpointer_ && (step_ % ckpt.interval() == 0 || last)) {
      TITAN_RETURN_IF_ERROR(Save(last && ckpt.last_save_model_only()));
    }
    TITAN_ASSIGN_OR_RETURN(const int stop_signal, AgreedStopSignal());
    if (stop_signal != 0 && !last) {
      LOG(WARNING) << "received signal " << stop_signal << "; stopping after step " << step_;
      if (checkpointer_ && step_ % ckpt.interval() != 0) TITAN_RETURN_IF_ERROR(Save(false));
      break;
    }
  }
  TITAN_RETURN_IF_ERROR(FinishPendingSave());
  LOG(INFO) << "training done at step " << step_;
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTraining(const JobConfig& config, const DistributedRuntime& runtime) {
  try {
    Trainer trainer(config, runtime);
    TITAN_RETURN_IF_ERROR(trainer.Init());
    return trainer.Train();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch error: ", e.what_without_backtrace()));
  }
}

}  // namespace titan
