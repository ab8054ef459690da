#ifndef TITAN_TESTS_PIPELINE_DEBUG_PIPELINE_H_
#define TITAN_TESTS_PIPELINE_DEBUG_PIPELINE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/pipeline/pipeline_parallel.h"
#include "lib/registry/model_spec.h"

namespace titan {

// A family's debug model (vocabulary cut to 512) under pipeline parallelism on one forked rank.
struct DebugPipeline {
  const ModelSpec* spec = nullptr;
  TransformerArgs args;
  std::unique_ptr<PipelineParallel> pipeline;
};

// Builds `model`'s debugmodel with `options` and fp32 parameters on the CPU, seeded alike on every
// rank; a failure is also printed, as a forked rank's only report.
absl::StatusOr<DebugPipeline> MakeDebugPipeline(const std::string& model, PipelineOptions options,
                                                const ParallelDims& dims,
                                                const MeshCommunicators& comms, int rank);

}  // namespace titan

#endif  // TITAN_TESTS_PIPELINE_DEBUG_PIPELINE_H_
