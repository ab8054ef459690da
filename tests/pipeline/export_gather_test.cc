// A consolidated export gathers the whole model a tensor at a time: under PP 2 x FSDP 2 no rank
// holds more than about one whole tensor beyond what its sink keeps, so a model larger than one
// GPU's memory still exports (the writer's sink moves each tensor to the host).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/pipeline/pipeline_parallel.h"
#include "lib/profiling/tracking_allocator.h"
#include "lib/registry/model_spec.h"
#include "tests/pipeline/debug_pipeline.h"

namespace titan {
namespace {

TEST(PipelineExportGatherTest, HoldsOneWholeTensorAtATime) {
  const ParallelDims dims = *ParallelDims::Build(1, 2, 1, 1, 2, 4);
  const std::vector<int> statuses =
      RunMeshRanks(dims, [&](int rank, const MeshCommunicators& comms) -> int {
        TrackingAllocator& allocator = TrackingAllocator::Install();
        PipelineOptions options;
        options.split.schedule = "1F1B";
        options.split.pp = 2;
        options.microbatches = 2;
        absl::StatusOr<DebugPipeline> debug =
            MakeDebugPipeline("llama3", options, dims, comms, rank);
        RANK_EXPECT(debug.ok());
        PipelineParallel& pipeline = *debug->pipeline;

        const std::map<std::string, std::vector<int64_t>> shapes = [&] {
          auto list = ParameterShapes(*debug->spec, debug->args);
          return std::map<std::string, std::vector<int64_t>>(list.begin(), list.end());
        }();
        int64_t largest = 0;
        for (const auto& [name, shape] : shapes) {
          largest = std::max(largest, at::empty(shape, at::kMeta).numel() * 4);
        }
        NamedTensors local;
        int64_t stage_bytes = 0;
        for (const ParamRef& p : pipeline.params()) {
          local.emplace_back(p.name, p.tensor->detach());
          stage_bytes += at::empty(shapes.at(p.name), at::kMeta).numel() * 4;
        }
        // Otherwise holding a stage at once would not stand out from holding one tensor.
        RANK_EXPECT(stage_bytes > 8 * largest);

        // A sink that keeps nothing (every rank but the writer): the peak is a few copies of one
        // whole tensor (the gathered rows, and Gloo's all-gather's own flat buffers; 3x measured),
        // not a stage's tensors.
        std::map<std::string, std::vector<int64_t>> seen;
        const int64_t live = allocator.live();
        allocator.ResetPeak();
        absl::Status gathered =
            pipeline.GatherFull(local, [&](const std::string& name, const at::Tensor& whole) {
              seen[name] = whole.sizes().vec();
              return absl::OkStatus();
            });
        RANK_EXPECT(gathered.ok());
        const int64_t streamed_peak = allocator.peak() - live;
        std::fprintf(stderr,
                     "rank %d: peak %lld bytes over a largest tensor of %lld (stage %lld)\n", rank,
                     static_cast<long long>(streamed_peak), static_cast<long long>(largest),
                     static_cast<long long>(stage_bytes));
        RANK_EXPECT(streamed_peak <= 4 * largest);
        // Rank 0 gets every parameter, whole; the others their stage's.
        if (rank == 0) {
          RANK_EXPECT(seen == shapes);
        } else {
          RANK_EXPECT(seen.size() == local.size());
          for (const auto& [name, shape] : seen) RANK_EXPECT(shape == shapes.at(name));
        }

        // The measurement sees whole tensors: a sink that keeps them all holds the stage, and
        // letting them go frees it. Measured as the drop on release: blocks of the first gather
        // that Gloo frees late would hide part of a rise measured from before the call.
        NamedTensors kept;
        allocator.ResetPeak();
        gathered =
            pipeline.GatherFull(local, [&](const std::string& name, const at::Tensor& whole) {
              kept.emplace_back(name, whole.clone());
              return absl::OkStatus();
            });
        RANK_EXPECT(gathered.ok());
        const int64_t holding = allocator.live();
        RANK_EXPECT(allocator.peak() >= holding);
        kept.clear();
        RANK_EXPECT(holding - allocator.live() >= stage_bytes);
        return 0;
      });
  EXPECT_EQ(statuses, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace titan
