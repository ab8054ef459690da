#include "lib/pipeline/pipeline_parallel.h"

#include <ATen/ATen.h>  // before glog: LibTorch defines its own LOG
#include <c10/core/GradMode.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/pipeline/schedule_check.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kEmbedding[] = "tok_embeddings.weight";
// Point-to-point tags outside the schedule's (which stay below 2 × stages × microbatches).
constexpr int kTiedGradTag = 1 << 28;
constexpr int kTiedValueTag = kTiedGradTag + 1;
constexpr int kGatherTag = kTiedGradTag + 2;

absl::StatusOr<PipelineSchedule> LoadSchedule(const PipelineOptions& options,
                                              const PipelineLayout& layout) {
  if (options.schedule_csv.empty()) {
    absl::StatusOr<PipelineSchedule> schedule =
        BuildSchedule(layout.kind, layout.pp, layout.stages_per_rank, options.microbatches);
    // Too few microbatches is fixed by the batch keys, which the schedule's error cannot name.
    if (!schedule.ok() && options.microbatches < layout.num_stages()) {
      return absl::InvalidArgumentError(
          absl::StrCat(schedule.status().message(),
                       "; microbatches = [training] local_batch_size / [parallelism] "
                       "pipeline_parallel_microbatch_size: raise local_batch_size or lower "
                       "pipeline_parallel_microbatch_size to make at least ",
                       layout.num_stages()));
    }
    return schedule;
  }
  std::ifstream in(options.schedule_csv);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("[parallelism] pipeline_parallel_schedule_csv: ",
                                            options.schedule_csv, ": cannot read it"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<PipelineSchedule> schedule = ParseScheduleCsv(text.str());
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("[parallelism] pipeline_parallel_schedule_csv: ",
                                                   options.schedule_csv, ": ",
                                                   schedule.status().message()));
  }
  return schedule;
}

// Adds `grad` into `param`'s gradient.
void AddGrad(at::Tensor& param, const at::Tensor& grad) {
  if (param.grad().defined()) {
    param.mutable_grad().add_(grad);
  } else {
    param.mutable_grad() = grad.clone();
  }
}

}  // namespace

PipelineParallel::PipelineParallel(const ModelSpec& spec, const TransformerArgs& args,
                                   PipelineLayout layout, const ParallelDims& dims,
                                   const MeshCommunicators* comms, int rank)
    : spec_(spec),
      args_(args),
      layout_(std::move(layout)),
      dims_(dims),
      comms_(comms),
      rank_(rank),
      pp_rank_(dims.CoordinatesOf(rank).pp) {}

PipelineParallel::~PipelineParallel() = default;

absl::StatusOr<std::unique_ptr<PipelineParallel>> PipelineParallel::Create(
    const ModelSpec& spec, const TransformerArgs& args, const PipelineOptions& options,
    const ParallelDims& dims, const MeshCommunicators* comms, int rank) {
  TITAN_ASSIGN_OR_RETURN(PipelineLayout layout, PlanPipeline(options.split, args.n_layers));
  if (layout.pp != dims.pp() || (dims.pp() > 1 && comms == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline of ", layout.pp, " ranks on a mesh of pipeline degree ", dims.pp(),
        comms == nullptr ? " without communicators" : ""));
  }
  std::unique_ptr<PipelineParallel> pipeline(
      new PipelineParallel(spec, args, std::move(layout), dims, comms, rank));
  const PipelineLayout& planned = pipeline->layout_;
  TITAN_ASSIGN_OR_RETURN(pipeline->schedule_, LoadSchedule(options, planned));
  pipeline->microbatches_ = options.microbatches;
  if (static_cast<int>(pipeline->schedule_.size()) != planned.pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("[parallelism] pipeline_parallel_schedule_csv: ", options.schedule_csv,
                     " holds ", pipeline->schedule_.size(), " ranks' actions, expected ",
                     planned.pp, " (pipeline_parallel_degree)"));
  }
  absl::StatusOr<ScheduleTimeline> checked = SimulateSchedule(
      pipeline->schedule_, planned.num_stages(), options.microbatches,
      [&](int stage) { return planned.RankOfStage(stage); });
  if (!checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parallelism] ", options.schedule_csv.empty() ? planned.kind.name : options.schedule_csv,
        " with ", options.microbatches, " microbatches: ", checked.status().message()));
  }
  TITAN_RETURN_IF_ERROR(pipeline->BuildStages(options));
  std::map<int, PipelineStage*> local;
  for (const auto& stage : pipeline->stages_) local[stage->index()] = stage.get();
  Communicator* comm = comms == nullptr ? nullptr : &comms->Get(MeshGroup::kPp);
  const int64_t sequence_shards =
      options.parallelize.tensor_parallel.sequence_parallel ? dims.tp() : 1;
  // FSDP's gathered parameters in param_dtype make the residual stream that dtype (the embedding
  // is gathered so too): stages pass it on as such, as one process computes it.
  const std::optional<at::ScalarType> param_dtype =
      options.parallelize.fsdp_mixed_precision.param_dtype;
  const at::ScalarType activation_dtype =
      dims.fsdp_enabled() && param_dtype ? *param_dtype : at::kFloat;
  TITAN_ASSIGN_OR_RETURN(
      pipeline->runner_,
      ScheduleRunner::Create(planned, local, comm, *checked, options.microbatches, args.dim,
                             sequence_shards, activation_dtype));
  // Validation runs one microbatch forward through the stages in order.
  PipelineSchedule forwards(planned.pp);
  for (int r = 0; r < planned.pp; ++r) {
    for (int stage : planned.StagesOfRank(r)) {
      forwards[r].push_back({PipelineOp::kForward, stage, 0});
    }
  }
  TITAN_ASSIGN_OR_RETURN(const ScheduleTimeline forward_timeline,
                         PlaySchedule(forwards, planned.num_stages(), 1,
                                      [&](int stage) { return planned.RankOfStage(stage); }));
  TITAN_ASSIGN_OR_RETURN(
      pipeline->eval_runner_,
      ScheduleRunner::Create(planned, local, comm, forward_timeline, 1, args.dim, sequence_shards,
                             activation_dtype));
  TITAN_RETURN_IF_ERROR(pipeline->SyncTiedCopies());
  return pipeline;
}

absl::Status PipelineParallel::BuildStages(const PipelineOptions& options) {
  const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
  // Every rank makes the one-process sequence of random draws (embedding, each layer, head):
  // the other stages' into a scratch part, one piece at a time, then dropped.
  auto draw_elsewhere = [&](const DecoderPart& part) {
    const int n = static_cast<int>(args_.n_layers);
    auto draw = [&](const DecoderPart& piece, const std::function<void(Decoder&)>& init) {
      std::unique_ptr<Decoder> scratch = spec_.Build(args_, meta, piece);
      scratch->Materialize(options.param_options);
      init(*scratch);
    };
    if (part.embedding) draw({0, 0, true, false}, [](Decoder& d) { d.InitEmbedding(); });
    for (int64_t i = part.first_layer; i < part.end_layer; ++i) {
      draw({i, i + 1, false, false}, [i](Decoder& d) { d.InitLayer(i); });
    }
    // A tied head draws nothing of its own.
    if (part.head && !args_.tie_word_embeddings) {
      draw({n, n, false, true}, [](Decoder& d) { d.InitHead(); });
    }
  };
  for (int s = 0; s < layout_.num_stages(); ++s) {
    if (layout_.RankOfStage(s) != pp_rank_) {
      draw_elsewhere(layout_.parts[s]);
      continue;
    }
    std::unique_ptr<Decoder> part = spec_.Build(args_, meta, layout_.parts[s]);
    ParallelizeOptions parallelize = options.parallelize;
    // Sharding initialises group by group; without it a stage is initialised whole before.
    if (dims_.fsdp_enabled()) {
      parallelize.materialize = options.param_options;
    } else {
      part->Materialize(options.param_options);
      part->InitWeights();
    }
    if (options.convert) TITAN_RETURN_IF_ERROR(options.convert(*part));
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<DataParallel> data_parallel,
                           spec_.parallelize(*part, parallelize, dims_, comms_));
    stages_.push_back(std::make_unique<PipelineStage>(s, layout_.num_stages(), std::move(part),
                                                      std::move(data_parallel)));
  }
  for (const auto& stage : stages_) {
    const size_t first = params_.size();
    for (const ParamRef& p : stage->model().NamedParameters()) {
      const bool tied = args_.tie_word_embeddings && p.name == kEmbedding;
      if (tied && stage->is_first()) tied_owner_ = p.tensor;
      if (tied && !stage->is_first()) {
        tied_copy_ = p.tensor;
        continue;
      }
      params_.push_back(p);
    }
    stage_param_counts_.push_back(params_.size() - first);
  }
  return absl::OkStatus();
}

Communicator* PipelineParallel::pp_comm() const { return &comms_->Get(MeshGroup::kPp); }

std::string PipelineParallel::ScheduleTable() const {
  absl::StatusOr<ScheduleTimeline> timeline =
      SimulateSchedule(schedule_, layout_.num_stages(), microbatches_,
                       [&](int stage) { return layout_.RankOfStage(stage); });
  return timeline.ok() ? FormatScheduleTable(*timeline) : timeline.status().ToString();
}

absl::StatusOr<at::Tensor> PipelineParallel::TrainStep(const Batch& batch, const HeadLoss& loss,
                                                       double loss_scale,
                                                       std::optional<at::ScalarType> autocast) {
  // DDP reduces once, after the step's last backward (FinishBackward).
  for (const auto& stage : stages_) stage->data_parallel().BeginBackward(false);
  StageRun run;
  run.loss = &loss;
  run.loss_scale = loss_scale;
  run.autocast = autocast;
  return runner_->Run(SplitBatch(batch, microbatches_), run);
}

absl::Status PipelineParallel::FinishBackward() {
  for (const auto& stage : stages_) TITAN_RETURN_IF_ERROR(stage->data_parallel().FinishBackward());
  if (!args_.tie_word_embeddings) return absl::OkStatus();
  c10::NoGradGuard no_grad;
  const int owner_rank = layout_.RankOfStage(0);
  const int copy_rank = layout_.RankOfStage(layout_.num_stages() - 1);
  if (tied_copy_ != nullptr) {
    const at::Tensor grad = tied_copy_->grad().contiguous();
    if (tied_owner_ != nullptr) {
      AddGrad(*tied_owner_, grad);
    } else {
      TITAN_RETURN_IF_ERROR(Await(pp_comm()->Send(grad, owner_rank, kTiedGradTag)));
    }
    tied_copy_->mutable_grad() = at::Tensor();
  } else if (tied_owner_ != nullptr) {
    at::Tensor grad = at::empty_like(*tied_owner_);
    TITAN_RETURN_IF_ERROR(Await(pp_comm()->Recv(grad, copy_rank, kTiedGradTag)));
    AddGrad(*tied_owner_, grad);
  }
  return absl::OkStatus();
}

absl::Status PipelineParallel::SyncTiedCopies() {
  if (!args_.tie_word_embeddings) return absl::OkStatus();
  c10::NoGradGuard no_grad;
  if (tied_copy_ != nullptr && tied_owner_ != nullptr) {
    tied_copy_->copy_(*tied_owner_);
  } else if (tied_owner_ != nullptr) {
    const int copy_rank = layout_.RankOfStage(layout_.num_stages() - 1);
    TITAN_RETURN_IF_ERROR(
        Await(pp_comm()->Send(tied_owner_->detach().contiguous(), copy_rank, kTiedValueTag)));
  } else if (tied_copy_ != nullptr) {
    at::Tensor value = at::empty_like(*tied_copy_);
    TITAN_RETURN_IF_ERROR(
        Await(pp_comm()->Recv(value, layout_.RankOfStage(0), kTiedValueTag)));
    tied_copy_->copy_(value);
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> PipelineParallel::EvalLossSum(const Batch& batch, const HeadLoss& loss,
                                                         std::optional<at::ScalarType> autocast) {
  c10::NoGradGuard no_grad;
  StageRun run;
  run.loss = &loss;
  run.autocast = autocast;
  return eval_runner_->Run({batch}, run);
}

absl::StatusOr<double> PipelineParallel::FromLastStage(double value) const {
  at::Tensor tensor = at::full({1}, value, at::kDouble);
  TITAN_RETURN_IF_ERROR(
      Await(pp_comm()->Broadcast(tensor, layout_.RankOfStage(layout_.num_stages() - 1))));
  return tensor.item<double>();
}

SquaredNormReducer PipelineParallel::GradNormReducer() const {
  // Each stage weighs and reduces its slice of the squares over its shards and tensor-parallel
  // ranks; the stages' totals then add up over the pipeline.
  std::vector<std::pair<int64_t, SquaredNormReducer>> slices;
  auto begin = params_.begin();
  for (size_t s = 0; s < stages_.size(); ++s) {
    const std::vector<ParamRef> mine(begin, begin + stage_param_counts_[s]);
    begin += stage_param_counts_[s];
    slices.emplace_back(static_cast<int64_t>(mine.size()),
                        stages_[s]->data_parallel().GradNormReducer(mine));
  }
  Communicator* pp = pp_comm();
  return [slices, pp](const at::Tensor& squares) {
    at::Tensor total = at::zeros({}, squares.options());
    int64_t begin = 0;
    for (const auto& [count, reduce] : slices) {
      const at::Tensor slice = squares.slice(0, begin, begin + count);
      total = total + (reduce ? reduce(slice) : slice.sum());
      begin += count;
    }
    const absl::Status status = Await(pp->AllReduce(total, ReduceOp::kSum));
    TORCH_CHECK(status.ok(), "gradient norm all-reduce over pipeline stages: ", status.ToString());
    return total;
  };
}

DataParallel& PipelineParallel::data_parallel() const { return stages_.front()->data_parallel(); }

absl::Status PipelineParallel::PrecomputeFloat8Scales() const {
  for (const auto& stage : stages_) {
    TITAN_RETURN_IF_ERROR(stage->data_parallel().PrecomputeFloat8Scales());
  }
  return absl::OkStatus();
}

bool PipelineParallel::WritesPiece(const std::string& name) const {
  // A stage's tensor-parallel bookkeeping knows its own names only; another stage's answer for
  // an unknown name is "replicated" (the first tensor-parallel rank writes it).
  for (const auto& stage : stages_) {
    if (stage->data_parallel().WritesPiece(name)) return true;
  }
  return false;
}

void PipelineParallel::InstallHooks(StepHooks& hooks) {
  hooks.Add(StepPhase::kAfterOptimizer, [this](const StepEvent&) { return SyncTiedCopies(); });
  hooks.Add(StepPhase::kOnLog, [this](const StepEvent& event) {
    const ScheduleRunner::Times times = runner_->TakeTimes();
    LOG(INFO) << absl::StrFormat(
        "pipeline rank %d (stages %s): waited %.3f s of %.3f s in the schedule since the last "
        "log (idle fraction %.4f) at step %d",
        pp_rank_, absl::StrJoin(layout_.StagesOfRank(pp_rank_), ","), times.waiting_seconds,
        times.total_seconds,
        times.total_seconds > 0 ? times.waiting_seconds / times.total_seconds : 0.0, event.step);
    return absl::OkStatus();
  });
}

NamedTensors PipelineParallel::CheckpointPieces(const NamedTensors& local,
                                                TensorBoxes& boxes) const {
  // Each stage's data-parallel wrapper cuts the names it shards and passes the others on.
  NamedTensors pieces = local;
  for (const auto& stage : stages_) pieces = stage->data_parallel().CheckpointPieces(pieces, boxes);
  return pieces;
}

absl::Status PipelineParallel::GatherFull(const NamedTensors& local,
                                          const WholeTensorSink& sink) const {
  if (local.empty()) return absl::InvalidArgumentError("pipeline gather: no tensors");
  const MeshCoordinates at = dims_.CoordinatesOf(rank_);
  // One pipeline group (the one holding rank 0) brings the stages together at its first rank.
  const bool gathering = at.dp_replicate == 0 && at.dp_shard == 0 && at.cp == 0 && at.tp == 0;
  absl::flat_hash_set<std::string> seen;
  int tag = kGatherTag;
  for (const auto& [name, tensor] : local) {
    // Each stage's data-parallel wrapper gathers the names it shards and passes the others on.
    at::Tensor whole = tensor;
    for (const auto& stage : stages_) {
      TITAN_ASSIGN_OR_RETURN(whole, stage->data_parallel().GatherWhole(name, whole));
    }
    if (gathering && pp_rank_ != 0) {
      TITAN_RETURN_IF_ERROR(Await(pp_comm()->Send(whole.contiguous(), 0, tag++)));
    }
    seen.insert(name);
    TITAN_RETURN_IF_ERROR(sink(name, whole));
  }
  if (!gathering || pp_rank_ != 0) return absl::OkStatus();
  return ReceiveStages(local.front().second.options(), seen, sink);
}

absl::Status PipelineParallel::ReceiveStages(const at::TensorOptions& options,
                                             absl::flat_hash_set<std::string>& seen,
                                             const WholeTensorSink& sink) const {
  const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
  for (int p = 1; p < layout_.pp; ++p) {
    // A rank sends its stages' parameters in params() order: ascending stages, tied copy left out.
    int tag = kGatherTag;
    for (int s : layout_.StagesOfRank(p)) {
      const std::unique_ptr<Decoder> part = spec_.Build(args_, meta, layout_.parts[s]);
      for (const ParamRef& param : part->NamedParameters()) {
        if (args_.tie_word_embeddings && param.name == kEmbedding && s != 0) continue;
        at::Tensor tensor = at::empty(param.tensor->sizes(), options);
        TITAN_RETURN_IF_ERROR(Await(pp_comm()->Recv(tensor, p, tag++)));
        seen.insert(param.name);
        TITAN_RETURN_IF_ERROR(sink(param.name, tensor));
      }
    }
  }
  for (const auto& [name, shape] : ParameterShapes(spec_, args_)) {
    if (!seen.contains(name)) {
      return absl::InternalError(absl::StrCat("pipeline gather: no stage sent ", name));
    }
  }
  return absl::OkStatus();
}

}  // namespace titan
