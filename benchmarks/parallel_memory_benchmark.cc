// parallel_memory_benchmark: what one training step of the job costs each rank in CPU memory,
// counted by a wrapped LibTorch CPU allocator: the activations autograd holds between forward and
// backward, the peak above the step's start, and parameter + optimizer bytes. Takes titan_train's
// flags (--nproc_per_node, the job file, --section.key=value) and runs one step on random tokens
// (the same on every rank of a data-parallel group, as the data loader's would be), e.g. (one
// command line):
//
//   bazel run //benchmarks:parallel_memory_benchmark -- --nproc_per_node=4
//     --job.config_file=configs/llama3_debugmodel.toml --training.seq_len=4096
//     --training.local_batch_size=1 --parallelism.context_parallel_degree=4
//     --parallelism.data_parallel_shard_degree=1
#include <ATen/ATen.h>

#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/profiling/tracking_allocator.h"
#include "lib/train/components.h"
#include "lib/train/trainer.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

absl::Status MeasureStep(const JobConfig& config, const DistributedRuntime& runtime,
                         TrackingAllocator* counter) {
  TITAN_ASSIGN_OR_RETURN(const RunSetup setup, SetUpRun(config, runtime));
  if (!setup.device.is_cpu()) {
    return absl::FailedPreconditionError("counts CPU allocations; this rank computes on a GPU");
  }
  TITAN_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, BuildTokenizer(config));
  TITAN_ASSIGN_OR_RETURN(const ModelInfo info, ResolveModel(config, *tokenizer, /*resume_dir=*/""));
  TITAN_ASSIGN_OR_RETURN(ModelBundle model, BuildModel(config, info, setup, runtime));
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                         BuildOptimizer(config, model.params, runtime));
  const auto& training = config.training();
  at::manual_seed(setup.seed + setup.dp_rank);
  Batch batch;
  const at::Tensor text = at::randint(
      info.args.vocab_size, {training.local_batch_size(), training.seq_len() + 1}, at::kLong);
  batch.tokens = text.narrow(1, 0, training.seq_len());
  batch.labels = text.narrow(1, 1, training.seq_len());
  TITAN_ASSIGN_OR_RETURN(const Batch local, model.data_parallel->ShardBatch(batch));

  const int64_t start = counter->live();
  counter->ResetPeak();
  at::Tensor loss = ForwardLossSum(*model.model, *model.data_parallel, local,
                                   model.data_parallel->Loss(nullptr, training.loss_chunk_size()),
                                   setup.autocast_dtype);
  const int64_t held = counter->live() - start;
  loss.backward();
  TITAN_RETURN_IF_ERROR(model.data_parallel->FinishBackward());
  const int64_t peak = counter->peak() - start;
  optimizer->Step();
  int64_t state = 0;
  for (const ParamRef& p : model.params) state += p.tensor->nbytes();
  for (const auto& [name, tensor] : optimizer->StateDict()) state += tensor.nbytes();
  std::cout << absl::StrFormat(
                   "rank %d: %d tokens; activations held after forward %d B; peak during forward "
                   "and backward %d B above the start; parameters + optimizer %d B\n",
                   runtime.rank(), local.tokens.numel(), held, peak, state)
            << std::flush;
  return absl::OkStatus();
}

absl::Status Measure(int argc, char** argv) {
  // Before anything LibTorch allocates, so every byte of the step is counted.
  TrackingAllocator* counter = &TrackingAllocator::Install();
  TITAN_ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(argc, argv));
  return RunJobOnThisRank(config, [&](const DistributedRuntime& runtime) {
    return MeasureStep(config, runtime, counter);
  });
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  return titan::RunRankedTool(
      argc, argv, "parallel_memory_benchmark",
      "parallel_memory_benchmark: one training step of a job (titan_train's flags, "
      "--nproc_per_node=N), printing each rank's activation, peak and parameter + optimizer "
      "bytes.\n",
      [&]() -> absl::Status {
        try {
          return titan::Measure(argc, argv);
        } catch (const c10::Error& e) {
          return absl::InternalError(e.what_without_backtrace());
        }
      });
}
