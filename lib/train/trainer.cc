#include "lib/train/trainer.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/data/text_data_loader.h"
#include "lib/metrics/flops.h"
#include "lib/model/autocast.h"
#include "lib/profiling/phase_range.h"
#include "lib/train/device.h"
#include "lib/train/grad_clip.h"
#include "lib/train/host_heap.h"
#include "lib/train/stop_signal.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"
#include "lib/util/torch_errors.h"

namespace titan {
namespace {

at::Tensor ToTensor(const std::vector<int64_t>& values, int64_t rows, int64_t cols,
                    const at::Device& device) {
  TORCH_CHECK(static_cast<int64_t>(values.size()) == rows * cols, "batch of ", values.size(),
              " tokens is not ", rows, " x ", cols);
  // A copy to the GPU from pageable memory waits for everything queued there; from pinned memory
  // it is queued like a kernel (the host allocator keeps the buffer until the copy has run).
  const bool gpu = !device.is_cpu();
  at::Tensor host = at::empty({rows, cols}, at::TensorOptions(at::kLong).pinned_memory(gpu));
  std::memcpy(host.data_ptr<int64_t>(), values.data(), values.size() * sizeof(int64_t));
  return gpu ? host.to(device, at::kLong, /*non_blocking=*/true) : host;
}

// A packed text batch on `device`; with document masking (`documents_of` set), the documents
// that `documents_of`'s BOS starts or, without BOS, its EOS ends.
Batch MakeBatch(const TokenBatch& tokens, const at::Device& device, const Tokenizer* documents_of) {
  Batch batch;
  batch.tokens = ToTensor(tokens.inputs, tokens.batch_size, tokens.seq_len, device);
  batch.labels = ToTensor(tokens.labels, tokens.batch_size, tokens.seq_len, device);
  if (documents_of != nullptr) {
    batch.documents = DocumentIds(batch.tokens, documents_of->bos_id(), documents_of->eos_id());
  }
  return batch;
}

// Ends a step's out-of-memory refusal: what shrinks a step.
constexpr char kOutOfMemoryAdvice[] =
    " (lower [training] local_batch_size or seq_len, or set [activation_checkpoint] mode = "
    "\"full\")";

}  // namespace

at::Tensor ForwardLossSum(Decoder& model, DataParallel& data_parallel, const Batch& batch,
                          const HeadLoss& loss, std::optional<at::ScalarType> autocast) {
  at::Tensor out;
  {
    PhaseRange range("forward");
    AutocastScope autocast_scope(batch.tokens.device().type(), autocast);
    DecoderInputs inputs;
    inputs.positions = batch.positions;
    inputs.documents = batch.documents;
    out = data_parallel.Forward(
        [&] { return loss.Forward(model, model.ForwardHidden(batch.tokens, inputs), batch); });
  }
  return loss.Sum(out, batch);
}

Trainer::Trainer(const JobConfig& config, const DistributedRuntime& runtime)
    : config_(config), runtime_(runtime) {}

Trainer::~Trainer() = default;

absl::Status Trainer::Init() {
  LogJobStart(config_, runtime_);
  TITAN_ASSIGN_OR_RETURN(setup_, SetUpRun(config_, runtime_));
  TITAN_ASSIGN_OR_RETURN(folder_locks_, LockRunFolders(config_, runtime_));
  TITAN_RETURN_IF_ERROR(runtime_.StartCommTrace(setup_.run_id));
  TITAN_ASSIGN_OR_RETURN(tokenizer_, BuildTokenizer(config_));
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> manager,
                         BuildCheckpointManager(config_, setup_, runtime_));
  ResumeChoice resume;
  if (manager != nullptr) {
    TITAN_ASSIGN_OR_RETURN(resume,
                           ChooseStepToResume(config_, runtime_, *manager, /*read_only=*/false));
    TITAN_RETURN_IF_ERROR(AdoptRecordedSeed(config_, resume, setup_));
    setup_.resume_dir = resume.dir;
  }
  TITAN_ASSIGN_OR_RETURN(const ModelInfo info,
                         ResolveModel(config_, *tokenizer_, setup_.resume_dir));
  TITAN_ASSIGN_OR_RETURN(model_, BuildModel(config_, info, setup_, runtime_));
  loss_ = batch_parallel().Loss(custom_loss_, config_.training().loss_chunk_size());
  grad_norm_reducer_ = model_.pipeline != nullptr
                           ? model_.pipeline->GradNormReducer()
                           : model_.data_parallel->GradNormReducer(model_.params);
  peak_flops_ = MatmulPeakFlops(setup_.device, setup_.autocast_dtype.has_value());
  if (runtime_.distributed()) {
    const ParallelDims& dims = runtime_.dims();
    LOG(INFO) << "rank " << runtime_.rank() << " of " << dims.world_size() << ": data parallel "
              << (dims.dp_shard_enabled() ? (dims.dp_replicate_enabled() ? "HSDP" : "FSDP")
                                          : (dims.dp_replicate_enabled() ? "DDP" : "off"))
              << " (replicate " << dims.dp_replicate() << " x shard " << dims.dp_shard()
              << "), dp rank " << setup_.dp_rank << " of " << setup_.dp_size
              << ", tensor parallel " << dims.tp() << ", context parallel " << dims.cp();
  }
  if (model_.pipeline != nullptr) {
    const PipelineLayout& layout = model_.pipeline->layout();
    const int pp_rank = runtime_.dims().CoordinatesOf(runtime_.rank()).pp;
    LOG(INFO) << "rank " << runtime_.rank() << ": pipeline stages "
              << absl::StrJoin(layout.StagesOfRank(pp_rank), ",") << " of " << layout.num_stages()
              << ", schedule "
              << (config_.parallelism().pipeline_parallel_schedule_csv().empty()
                      ? layout.kind.name
                      : absl::StrCat(config_.parallelism().pipeline_parallel_schedule_csv(), " (",
                                     layout.kind.name, "'s stage placement)"));
    if (runtime_.rank() == 0) {
      LOG(INFO) << "pipeline schedule:\n" << model_.pipeline->ScheduleTable();
    }
  }
  TITAN_ASSIGN_OR_RETURN(optimizer_, BuildOptimizer(config_, model_.params, runtime_));
  if (config_.compile().cuda_graph()) TITAN_RETURN_IF_ERROR(SetUpCudaGraph());
  TITAN_ASSIGN_OR_RETURN(schedule_, BuildLrSchedule(config_));
  microbatches_ = GradientAccumulationSteps(config_, setup_);
  TITAN_ASSIGN_OR_RETURN(train_data_, BuildTrainData(config_, tokenizer_.get(), setup_));
  if (config_.validation().enable()) TITAN_RETURN_IF_ERROR(CheckValidationData());
  if (manager != nullptr) {
    CheckpointedParts parts{&model_.params,    optimizer_.get(), &model_.sharded(),
                            train_data_.get(), &model_.info,     model_.num_params};
    parts.seed = setup_.seed;
    TITAN_ASSIGN_OR_RETURN(checkpointer_,
                           TrainCheckpointer::Create(config_, runtime_, std::move(manager), parts));
    TITAN_RETURN_IF_ERROR(checkpointer_->Resume(state_, std::move(resume)));
    // Also with nothing left to train: a save killed before its cleanup left a step too many.
    TITAN_RETURN_IF_ERROR(checkpointer_->EnforceKeepLatest());
    // The tied head's copy on the last stage is not saved: it follows the loaded embedding.
    if (model_.pipeline != nullptr) TITAN_RETURN_IF_ERROR(model_.pipeline->SyncTiedCopies());
  }
  // Bad training data (a missing text field, a malformed first line) is refused now, with its
  // key, before the run makes its outputs: not at step 1.
  if (state_.step < config_.training().steps()) {
    TITAN_RETURN_IF_ERROR(WithContext(train_data_->CheckNextBatch(), "[training] dataset_path"));
  }
  WarnProfilingWithoutEffectAfterResume(config_, runtime_, state_.step);
  // Before the metrics files: a refused [profiling] key leaves no TensorBoard file behind.
  TITAN_ASSIGN_OR_RETURN(
      profiler_, StepProfiler::Create(ProfilerOptionsFromConfig(
                     config_, runtime_.rank(), setup_.device, runtime_.ProfilerDistributedInfo())));
  TITAN_ASSIGN_OR_RETURN(metrics_,
                         BuildResumedMetrics(config_, runtime_, setup_, checkpointer_.get()));
  monitor_ = ResourceMonitor::FromConfig(config_, setup_.device);
  TITAN_RETURN_IF_ERROR(InstallHooks());
  // Last, once the job has started: a run refused at startup leaves the previous config.toml.
  if (runtime_.rank() == 0) {
    TITAN_RETURN_IF_ERROR(WriteFileAtomically(config_.job().dump_folder() + "/config.toml",
                                              JobConfigToToml(config_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::ForEachValidationBatch(
    int64_t max_batches, const std::function<absl::Status(const TokenBatch&)>& use,
    int64_t* passes) const {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<TextDataLoader> loader,
                         BuildValidationData(config_, tokenizer_.get(), setup_));
  int64_t batches = 0;
  while (max_batches < 0 || batches < max_batches) {
    absl::StatusOr<TokenBatch> tokens = loader->NextBatch(config_.validation().local_batch_size());
    if (absl::IsOutOfRange(tokens.status()) || absl::IsNotFound(tokens.status())) break;
    TITAN_RETURN_IF_ERROR(tokens.status());
    TITAN_RETURN_IF_ERROR(use(*tokens));
    ++batches;
  }
  if (passes != nullptr) *passes = loader->dataset().epoch() + 1;
  return batches;
}

absl::Status Trainer::CheckValidationData() {
  const auto& v = config_.validation();
  // This rank's share of the batches one evaluation reads: bad data found now costs no training
  // steps.
  int64_t passes = 1;
  absl::StatusOr<int64_t> batches = ForEachValidationBatch(
      v.steps(), [](const TokenBatch&) { return absl::OkStatus(); }, &passes);
  TITAN_RETURN_IF_ERROR(WithContext(batches.status(), "[validation] dataset_path"));
  LOG_IF(INFO, runtime_.rank() == 0 && passes > 1)
      << "[validation] steps = " << v.steps() << " batches re-loop " << v.dataset_path()
      << ": each evaluation begins " << passes << " passes over it (as torchtitan's validator "
      << "repeats the data of a bounded evaluation; steps = -1 reads it once)";
  validation_batches_ = *batches;
  // The longest share sets the count: shorter ones then run batches that count no token.
  if (setup_.dp_size > 1) {
    at::Tensor most = at::full({1}, *batches, at::kLong);
    TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kDp).AllReduce(most, ReduceOp::kMax)));
    validation_batches_ = most.item<int64_t>();
  }
  if (validation_batches_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat("[validation] dataset_path: ", v.dataset_path(),
                                                   " holds less than one window of seq_len ",
                                                   v.seq_len(), " + 1 tokens"));
  }
  LOG_IF(INFO, *batches < validation_batches_)
      << "rank " << runtime_.rank() << ": its share of the validation set holds " << *batches
      << " of the " << validation_batches_
      << " batches every rank evaluates; it runs the rest without counted labels";
  return absl::OkStatus();
}

absl::Status Trainer::SetUpCudaGraph() {
  if (!setup_.device.is_cuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[compile] cuda_graph = true needs a CUDA device; this run is on ", setup_.device.str()));
  }
  if (runtime_.distributed()) {
    return absl::UnimplementedError(
        "[compile] cuda_graph = true runs one process only: the collectives of data, tensor, "
        "context and pipeline parallelism are not captured");
  }
  if (config_.model().attn_mask_type() == "block_causal") {
    return absl::UnimplementedError(
        "[compile] cuda_graph = true with [model] attn_mask_type = \"block_causal\": document "
        "masks are built from each batch's tokens and are not captured; use \"causal\"");
  }
  // One eager step first: lazy initialisation (cuBLAS and cuDNN plans, SDPA's backend) stays out
  // of the graph.
  cuda_graph_ = std::make_unique<CudaGraphedMicrobatch>(model_.params, /*eager_steps=*/1);
  return absl::OkStatus();
}

absl::Status Trainer::InstallHooks() {
  if (model_.pipeline != nullptr) model_.pipeline->InstallHooks(hooks_);
  if (profiler_ != nullptr) {
    hooks_.Add(StepPhase::kStepBegin,
               [this](const StepEvent& event) { return profiler_->StepBegin(event.step); });
    hooks_.Add(StepPhase::kStepEnd,
               [this](const StepEvent& event) { return profiler_->StepEnd(event.step); });
  }
  if (config_.float8().precompute_float8_dynamic_scale_for_fsdp()) {
    // As torchtitan, after the optimizer step: the next gathers (validation's too) use them.
    hooks_.Add(StepPhase::kAfterOptimizer, [this](const StepEvent&) {
      return model_.pipeline != nullptr ? model_.pipeline->PrecomputeFloat8Scales()
                                        : model_.data_parallel->PrecomputeFloat8Scales();
    });
  }
  const int64_t gc_freq = config_.training().gc_freq();
  hooks_.Add(StepPhase::kStepEnd, [gc_freq](const StepEvent& event) {
    ReturnFreedHostHeapAtStep(event.step, gc_freq);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Batch>> Trainer::NextMicrobatches() {
  const Tokenizer* documents_of =
      config_.model().attn_mask_type() == "block_causal" ? tokenizer_.get() : nullptr;
  std::vector<Batch> batches;
  for (int64_t m = 0; m < microbatches_; ++m) {
    TITAN_ASSIGN_OR_RETURN(TokenBatch tokens,
                           train_data_->NextBatch(config_.training().local_batch_size()));
    batches.push_back(MakeBatch(tokens, setup_.device, documents_of));
  }
  return batches;
}

absl::Status Trainer::set_loss(LossFn loss) {
  if (config_.training().loss_chunk_size() > 0) {
    return absl::FailedPreconditionError(
        "[training] loss_chunk_size fuses the head with the cross-entropy; a loss of its own "
        "needs the logits: set it to 0");
  }
  custom_loss_ = std::move(loss);
  if (model_.data_parallel != nullptr || model_.pipeline != nullptr) {
    loss_ = batch_parallel().Loss(custom_loss_);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::TrainStep(const std::vector<Batch>& full_microbatches,
                                              bool labels_masked, bool read_metrics) {
  const int64_t step = state_.step + 1;
  TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kStepBegin, {step}));
  // Context-parallel ranks each take a share of every sequence: the step's tokens are split over
  // data-parallel × context-parallel ranks.
  const int token_ranks = setup_.dp_size * batch_parallel().context_parallel_degree();
  std::vector<Batch> microbatches;
  for (const Batch& batch : full_microbatches) {
    TITAN_ASSIGN_OR_RETURN(Batch shard, batch_parallel().ShardBatch(batch));
    microbatches.push_back(std::move(shard));
  }
  StepResult result;
  int64_t counted = 0;
  for (const Batch& batch : microbatches) {
    result.tokens += batch.tokens.numel();
    counted += labels_masked ? CountedTokens(batch.labels) : batch.labels.numel();
  }
  // Every rank reads equally many tokens, so unmasked counts need no communication.
  double global_counted = static_cast<double>(counted) * token_ranks;
  if (labels_masked) {
    TITAN_ASSIGN_OR_RETURN(global_counted, SumOverDp(static_cast<double>(counted)));
  }
  // Data parallelism averages gradients over ranks: each rank scales its summed loss by
  // token_ranks / global_counted so the average is the gradient of the global mean.
  const double per_rank_counted = global_counted / token_ranks;
  // A captured graph accumulates into the gradients' storage: they are zeroed, not dropped.
  optimizer_->ZeroGrad(/*set_to_none=*/cuda_graph_ == nullptr);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(setup_.device));
  PipelineParallel* pipeline = model_.pipeline.get();
  for (size_t m = 0; m < microbatches.size(); ++m) {
    TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kBeforeForward, {step, int64_t(m)}));
    at::Tensor sum;
    if (pipeline != nullptr) {
      // The schedule runs forward and backward of the batch's pipeline microbatches.
      TITAN_ASSIGN_OR_RETURN(sum, pipeline->TrainStep(microbatches[m], loss_, per_rank_counted,
                                                      setup_.autocast_dtype));
    } else {
      const bool last_microbatch = m + 1 == microbatches.size();
      auto forward_backward = [&](const Batch& batch) {
        at::Tensor batch_sum = ForwardLossSum(*model_.model, *model_.data_parallel, batch, loss_,
                                              setup_.autocast_dtype);
        model_.data_parallel->BeginBackward(last_microbatch);
        PhaseRange range("backward");
        (batch_sum / per_rank_counted).backward();
        return batch_sum.detach();
      };
      if (cuda_graph_ != nullptr) {
        TITAN_ASSIGN_OR_RETURN(
            sum, cuda_graph_->Run(m == 0, microbatches[m], per_rank_counted, forward_backward));
      } else {
        sum = forward_backward(microbatches[m]);
      }
    }
    loss_sum += sum.detach();
    TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kAfterBackward, {step, int64_t(m)}));
  }
  TITAN_RETURN_IF_ERROR(pipeline != nullptr ? pipeline->FinishBackward()
                                            : model_.data_parallel->FinishBackward());
  std::vector<at::Tensor> tensors;
  for (const ParamRef& p : model_.params) tensors.push_back(*p.tensor);
  // The norm and the clipping scale stay on the device unless the step is logged; the optimizer
  // applies the scale.
  const GradClip clip = ComputeGradClip(tensors, config_.training().max_norm(), grad_norm_reducer_);
  step_loss_sum_ = loss_sum;
  step_grad_norm_ = clip.total_norm;
  step_counted_ = global_counted;
  if (read_metrics) TITAN_RETURN_IF_ERROR(ReadStepMetrics(result));
  // Noted on the device (no host read): Train reads it when it logs or saves.
  const at::Tensor nonfinite = clip.total_norm.isfinite().logical_not();
  nonfinite_grad_norm_ =
      nonfinite_grad_norm_.defined() ? nonfinite_grad_norm_.logical_or(nonfinite) : nonfinite;
  TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kBeforeOptimizer, {step}));
  {
    PhaseRange range("optimizer");
    optimizer_->SetLrFactor(schedule_->Factor(state_.lr_step));
    result.lr = optimizer_->lr();
    optimizer_->Step(clip.scale);
  }
  TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kAfterOptimizer, {step}));
  state_.step = step;
  ++state_.lr_step;
  state_.ntokens_seen += result.tokens * token_ranks;
  TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kStepEnd, {step}));
  return result;
}

absl::Status Trainer::ReadStepMetrics(StepResult& result) {
  if (setup_.dp_size * batch_parallel().context_parallel_degree() == 1) {
    // In fp32 as a mean-reduced cross-entropy computes it (the same bits for one microbatch).
    result.loss = (step_loss_sum_ / step_counted_).item<double>();
  } else {
    TITAN_ASSIGN_OR_RETURN(const double total, SumOverDp(step_loss_sum_.item<double>()));
    result.loss = total / step_counted_;
  }
  // Only the last pipeline stage computed the loss.
  if (model_.pipeline != nullptr) {
    TITAN_ASSIGN_OR_RETURN(result.loss, model_.pipeline->FromLastStage(result.loss));
  }
  result.grad_norm = step_grad_norm_.item<double>();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::TrainStepOrOom(const std::vector<Batch>& microbatches,
                                                   bool read_metrics) {
  try {
    return TrainStep(microbatches, /*labels_masked=*/false, read_metrics);
  } catch (const c10::OutOfMemoryError& e) {
    // As torchtitan on its way out: the allocator's history shows what filled the memory.
    if (profiler_ != nullptr) {
      const absl::Status dumped = profiler_->DumpMemorySnapshotOnOom(state_.step);
      LOG_IF(ERROR, !dumped.ok()) << dumped;
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("step ", state_.step + 1,
                     ": out of device memory: ", e.what_without_backtrace(), kOutOfMemoryAdvice));
  } catch (const c10::Error& e) {
    // The CPU allocator's failure is a plain c10::Error, not an OutOfMemoryError.
    if (!absl::StrContains(e.what_without_backtrace(), "DefaultCPUAllocator")) throw;
    return absl::ResourceExhaustedError(
        absl::StrCat("step ", state_.step + 1, ": out of host memory: ", e.what_without_backtrace(),
                     kOutOfMemoryAdvice));
  }
}

absl::Status Trainer::CheckFiniteSince(int64_t step) {
  if (!nonfinite_grad_norm_.defined()) return absl::OkStatus();
  const bool nonfinite = nonfinite_grad_norm_.item<bool>();
  nonfinite_grad_norm_ = at::Tensor();
  const int64_t first_unchecked = checked_through_step_ + 1;
  checked_through_step_ = step;
  if (!nonfinite) return absl::OkStatus();
  // Every rank reads the same reduced norm, so every rank stops here.
  return absl::InternalError(absl::StrCat(
      "the gradient norm was not finite (NaN or inf) at ",
      first_unchecked == step ? absl::StrCat("step ", step)
                              : absl::StrCat("a step in ", first_unchecked, "..", step),
      ": the loss diverged and the weights are no longer finite; stopped without saving them (a "
      "checkpoint saved before, if any, is the last good one): lower [optimizer] lr or raise "
      "[lr_scheduler] warmup_steps"));
}

DataParallel& Trainer::batch_parallel() const {
  return model_.pipeline != nullptr ? model_.pipeline->data_parallel() : *model_.data_parallel;
}

absl::Status Trainer::SumOverDp(const at::Tensor& values) const {
  if (!runtime_.distributed()) return absl::OkStatus();
  for (MeshGroup group : {MeshGroup::kDp, MeshGroup::kCp}) {
    if (runtime_.comm(group).size() == 1) continue;
    TITAN_RETURN_IF_ERROR(Await(runtime_.comm(group).AllReduce(values, ReduceOp::kSum)));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::SumOverDp(double value) const {
  const at::Tensor sum = at::full({1}, value, at::kDouble);
  TITAN_RETURN_IF_ERROR(SumOverDp(sum));
  return sum.item<double>();
}

void Trainer::LogStateMemory() const {
  int64_t param_bytes = 0;
  for (const ParamRef& p : model_.params) param_bytes += p.tensor->nbytes();
  // The tensors held (a float32 step), not StateDict()'s copies (an int64 step, as checkpoints).
  int64_t optimizer_bytes = 0;
  for (const at::Tensor& tensor : optimizer_->StateTensors()) optimizer_bytes += tensor.nbytes();
  LOG(INFO) << "rank " << runtime_.rank() << " state memory: parameters " << param_bytes
            << " B + optimizer " << optimizer_bytes << " B = " << param_bytes + optimizer_bytes
            << " B";
}

absl::StatusOr<double> Trainer::Validate() {
  const auto& v = config_.validation();
  const Tokenizer* documents_of =
      config_.model().attn_mask_type() == "block_causal" ? tokenizer_.get() : nullptr;
  c10::NoGradGuard no_grad;
  // Summed on the device and read once at the end, so batches queue without waiting for each other.
  const at::TensorOptions on_device = at::TensorOptions().device(setup_.device);
  at::Tensor device_loss_sum = at::zeros({}, on_device.dtype(at::kDouble));
  at::Tensor device_counted = at::zeros({}, on_device.dtype(at::kLong));
  auto evaluate = [&](const TokenBatch& tokens) -> absl::Status {
    TITAN_ASSIGN_OR_RETURN(const Batch batch, batch_parallel().ShardBatch(
                                                  MakeBatch(tokens, setup_.device, documents_of)));
    if (model_.pipeline != nullptr) {
      TITAN_ASSIGN_OR_RETURN(const at::Tensor sum,
                             model_.pipeline->EvalLossSum(batch, loss_, setup_.autocast_dtype));
      device_loss_sum += sum;
    } else {
      device_loss_sum +=
          ForwardLossSum(*model_.model, *model_.data_parallel, batch, loss_, setup_.autocast_dtype);
    }
    device_counted += CountedTokensOnDevice(batch.labels);
    return absl::OkStatus();
  };
  // Each data-parallel rank evaluates its share of every global batch, as in training.
  TITAN_ASSIGN_OR_RETURN(int64_t batches, ForEachValidationBatch(validation_batches_, evaluate));
  // A share that ran out first (the set's last global batch is short) runs forwards that count no
  // token, so that FSDP's all-gathers, which span data-parallel ranks, still pair up. Full-sized,
  // so a pipeline splits it into its usual microbatches.
  TokenBatch uncounted;
  uncounted.batch_size = v.local_batch_size();
  uncounted.seq_len = v.seq_len();
  uncounted.inputs.assign(v.local_batch_size() * v.seq_len(), 0);
  uncounted.labels.assign(v.local_batch_size() * v.seq_len(), kIgnoreIndex);
  for (; batches < validation_batches_; ++batches) TITAN_RETURN_IF_ERROR(evaluate(uncounted));
  double loss_sum = device_loss_sum.item<double>();
  const int64_t counted = device_counted.item<int64_t>();
  // Only the last pipeline stage computed the losses.
  if (model_.pipeline != nullptr) {
    TITAN_ASSIGN_OR_RETURN(loss_sum, model_.pipeline->FromLastStage(loss_sum));
  }
  // Data-parallel ranks evaluated other sequences, context-parallel ranks shares of the same ones.
  const at::Tensor sums = at::tensor({loss_sum, static_cast<double>(counted)}, at::kDouble);
  TITAN_RETURN_IF_ERROR(SumOverDp(sums));
  const double global_counted = sums[1].item<double>();
  if (global_counted == 0) {
    return absl::InvalidArgumentError(absl::StrCat("[validation] dataset_path: ", v.dataset_path(),
                                                   " holds less than one batch"));
  }
  return sums[0].item<double>() / global_counted;
}

absl::Status Trainer::Train() {
  const auto& training = config_.training();
  const auto& ckpt = config_.checkpoint();
  StopSignal stop_signal(runtime_);
  if (state_.step >= training.steps()) {
    // Step 0 is where a run starts without a checkpoint to resume.
    if (state_.step == 0) {
      LOG(INFO) << "[training] steps = 0: nothing to train";
    } else {
      LOG(INFO) << "checkpoint is at step " << state_.step << " >= [training] steps "
                << training.steps() << "; nothing to train";
    }
    return absl::OkStatus();
  }
  LOG(INFO) << "training from step " << state_.step + 1 << " to " << training.steps() << ", "
            << microbatches_ << " microbatch(es) of " << training.local_batch_size() << " x "
            << training.seq_len() << " tokens per step";
  // Tensor- and pipeline-parallel ranks process the same tokens: a device's share of a rank's
  // (torchtitan divides by the non-data-parallel degree; context-parallel ranks hold shards).
  const int ranks_per_token =
      runtime_.distributed() ? runtime_.dims().tp() * runtime_.dims().pp() : 1;
  Stopwatch stopwatch;
  int64_t window_tokens = 0;
  checked_through_step_ = state_.step;
  while (state_.step < training.steps()) {
    TITAN_ASSIGN_OR_RETURN(std::vector<Batch> batches, NextMicrobatches());
    const int64_t step = state_.step + 1;
    const bool last = step == training.steps();
    // torchtitan's Validator.should_validate: step 1 and every freq-th (the last only if one).
    const bool validate =
        config_.validation().enable() && (step == 1 || step % config_.validation().freq() == 0);
    const bool log = step == 1 || step % config_.metrics().log_freq() == 0 || last || validate;
    TITAN_ASSIGN_OR_RETURN(StepResult result, TrainStepOrOom(batches, /*read_metrics=*/log));
    window_tokens += result.tokens;
    auto log_step = [&]() -> absl::Status {
      const Throughput throughput =
          ComputeThroughput(static_cast<double>(window_tokens) / ranks_per_token, stopwatch.Lap(),
                            model_.flops_per_token, peak_flops_);
      StepMetrics m;
      m.step = step;
      m.loss = result.loss;
      m.grad_norm = result.grad_norm;
      m.lr = result.lr;
      m.tps = throughput.tokens_per_second;
      m.tflops = throughput.tflops;
      m.mfu = throughput.mfu_percent;
      m.memory_gib = PeakMemoryGiB(setup_.device);
      if (validate) {
        TITAN_ASSIGN_OR_RETURN(m.validation_loss, Validate());
        stopwatch.Lap();  // validation time is not training throughput
      }
      TITAN_RETURN_IF_ERROR(hooks_.Run(StepPhase::kOnLog, {step, 0, &m}));
      if (metrics_ != nullptr) {
        TITAN_RETURN_IF_ERROR(metrics_->Log(m));
      } else {
        LOG(INFO) << FormatStepLine(m, /*color=*/false);
      }
      window_tokens = 0;
      return CheckFiniteSince(step);
    };
    if (log) TITAN_RETURN_IF_ERROR(log_step());
    if (step == 1) {
      runtime_.SetTimeout(absl::Seconds(config_.comm().train_timeout_seconds()));
      LogStateMemory();
    }
    // A save first reads the steps since the last check: a diverged update is never saved.
    auto save = [&](bool model_only) -> absl::Status {
      TITAN_RETURN_IF_ERROR(CheckFiniteSince(step));
      return checkpointer_->Save(state_, model_only);
    };
    const bool saved = checkpointer_ && (step % ckpt.interval() == 0 || last ||
                                         (step == 1 && ckpt.enable_first_step_checkpoint()));
    if (saved) TITAN_RETURN_IF_ERROR(save(last && ckpt.last_save_model_only()));
    TITAN_ASSIGN_OR_RETURN(const int signal, stop_signal.Agreed());
    if (signal != 0 && !last) {
      LOG(WARNING) << "received signal " << signal << "; stopping after step " << step;
      // The run's last row shows where it stopped; every rank agreed, so all read the loss.
      if (!log) {
        TITAN_RETURN_IF_ERROR(ReadStepMetrics(result));
        TITAN_RETURN_IF_ERROR(log_step());
      }
      if (checkpointer_ && !saved) TITAN_RETURN_IF_ERROR(save(false));
      break;
    }
  }
  TITAN_RETURN_IF_ERROR(stop_signal.Finish());
  if (checkpointer_) TITAN_RETURN_IF_ERROR(checkpointer_->FinishPendingSave());
  LOG(INFO) << "training done at step " << state_.step;
  return absl::OkStatus();
}

absl::Status RunTraining(const JobConfig& config, const DistributedRuntime& runtime) {
  return CatchTorchErrors([&]() -> absl::Status {
    Trainer trainer(config, runtime);
    TITAN_RETURN_IF_ERROR(trainer.Init());
    return trainer.Train();
  });
}

}  // namespace titan
