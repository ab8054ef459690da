#include "tests/pipeline/debug_pipeline.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <utility>

#include "lib/util/status_macros.h"

namespace titan {

absl::StatusOr<DebugPipeline> MakeDebugPipeline(const std::string& model, PipelineOptions options,
                                                const ParallelDims& dims,
                                                const MeshCommunicators& comms, int rank) {
  DebugPipeline debug;
  absl::StatusOr<std::unique_ptr<PipelineParallel>> pipeline =
      [&]() -> absl::StatusOr<std::unique_ptr<PipelineParallel>> {
    TITAN_ASSIGN_OR_RETURN(debug.spec, FindModel(model));
    TITAN_ASSIGN_OR_RETURN(debug.args, debug.spec->Flavor("debugmodel"));
    debug.args.vocab_size = 512;
    options.param_options = at::TensorOptions().dtype(at::kFloat);
    at::manual_seed(7);
    return PipelineParallel::Create(*debug.spec, debug.args, options, dims, &comms, rank);
  }();
  if (!pipeline.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, pipeline.status().ToString().c_str());
    return pipeline.status();
  }
  debug.pipeline = *std::move(pipeline);
  return debug;
}

}  // namespace titan
