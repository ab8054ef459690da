// The trainer's step on several ranks (forked, Gloo on loopback), as titan_train runs it: every
// parallelism composed. A file of its own: ranks fork before anything touches LibTorch.

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/config/job_config.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/train/step_host_reads.h"
#include "lib/train/trainer.h"

namespace titan {
namespace {

struct Layout {
  std::string name;
  int world;
  std::vector<std::string> flags;
  // A logged step's: the loss and the gradient norm, then host doubles after a Gloo collective
  // (the loss summed over data- and context-parallel ranks; with pipelines, from the last stage).
  int logged_reads;
};

std::string PrintLayout(const ::testing::TestParamInfo<Layout>& info) { return info.param.name; }

class TrainerRanksTest : public ::testing::TestWithParam<Layout> {};

// GPU speed: a step that logs nothing never waits for the device on any rank, whatever composes
// (tensor- and sequence-parallel collectives, context-parallel attention, FSDP gathers and
// reduce-scatters, pipeline sends, the vocabulary-parallel loss). Only the optimizer's step
// counters are read, one per parameter, as in trainer_test's single process.
TEST_P(TrainerRanksTest, UnloggedStepReadsNoTensorOnTheHostOnAnyRank) {
  const Layout& layout = GetParam();
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<std::string> flags = {
      absl::StrCat("--job.dump_folder=", tmp != nullptr ? tmp : "/tmp", "/", layout.name),
      "--training.seq_len=64",
      "--training.local_batch_size=8",
      "--training.seed=0",
      "--checkpoint.enable=false",
      "--metrics.enable_tensorboard=false",
      "--validation.enable=false",
      "--comm.train_timeout_seconds=30",
      "--parallelism.data_parallel_shard_degree=1"};
  flags.insert(flags.end(), layout.flags.begin(), layout.flags.end());
  absl::StatusOr<JobConfig> config = ParseJobConfig("configs/llama3_debugmodel.toml", flags);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(ValidateJobConfig(*config, layout.world).ok());

  const std::vector<int> statuses =
      RunRuntimeRanks(*config, layout.world, [&](int rank, const DistributedRuntime& runtime) {
        Trainer trainer(*config, runtime);
        absl::Status init = trainer.Init();
        if (!init.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, init.ToString().c_str());
        RANK_EXPECT(init.ok());
        absl::StatusOr<std::vector<Batch>> microbatches = trainer.NextMicrobatches();
        RANK_EXPECT(microbatches.ok());
        // The first step makes the optimizer's state.
        RANK_EXPECT(trainer.TrainStep(*microbatches, false, /*read_metrics=*/false).ok());
        const StepHostReads unlogged =
            CountStepHostReads(trainer, *microbatches, /*read_metrics=*/false);
        const StepHostReads logged =
            CountStepHostReads(trainer, *microbatches, /*read_metrics=*/true);
        std::fprintf(stderr, "rank %d: host reads unlogged %d, logged %d; step counters %d\n", rank,
                     unlogged.device_values, logged.device_values, unlogged.step_counters);
        RANK_EXPECT(unlogged.result.ok());
        RANK_EXPECT(unlogged.device_values == 0);
        RANK_EXPECT(unlogged.step_counters == static_cast<int>(trainer.params().size()));
        // The count sees reads.
        RANK_EXPECT(logged.result.ok() && logged.result->loss > 0 && logged.result->grad_norm > 0);
        RANK_EXPECT(logged.device_values == layout.logged_reads);
        return 0;
      });
  ASSERT_EQ(statuses.size(), static_cast<size_t>(layout.world));
  for (int rank = 0; rank < layout.world; ++rank) EXPECT_EQ(statuses[rank], 0) << "rank " << rank;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainerRanksTest,
                         ::testing::Values(Layout{"fsdp2_cp2_tp2",
                                                  8,
                                                  {"--parallelism.data_parallel_shard_degree=2",
                                                   "--parallelism.context_parallel_degree=2",
                                                   "--parallelism.tensor_parallel_degree=2"},
                                                  3},
                                           Layout{"hsdp_tp2_fused_loss",
                                                  8,
                                                  {"--parallelism.data_parallel_replicate_degree=2",
                                                   "--parallelism.data_parallel_shard_degree=2",
                                                   "--parallelism.tensor_parallel_degree=2",
                                                   "--training.loss_chunk_size=48"},
                                                  3},
                                           Layout{"pp2_fsdp2_tp2",
                                                  8,
                                                  {"--parallelism.pipeline_parallel_degree=2",
                                                   "--parallelism.data_parallel_shard_degree=2",
                                                   "--parallelism.tensor_parallel_degree=2"},
                                                  4}),
                         PrintLayout);

}  // namespace
}  // namespace titan
