// Pipeline stages under FSDP mixed precision pass their activations and gradients on in FSDP's
// param_dtype, the dtype their residual stream computes in (as one process's), not in fp32: half
// the bytes, and every stage computing as the first does.
#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/pipeline/pipeline_parallel.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"
#include "tests/pipeline/debug_pipeline.h"

namespace titan {
namespace {

// The dtypes of every tensor this rank's pipeline group sent or received.
std::vector<at::ScalarType>& TransferDtypes() {
  static std::vector<at::ScalarType> dtypes;
  return dtypes;
}

class DtypeRecorder : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) override {
    for (const P2POp& op : ops) TransferDtypes().push_back(op.tensor.scalar_type());
    return ForwardingCommunicator::BatchP2P(std::move(ops));
  }
};

// PP 2 x FSDP 2, 1F1B: with param_dtype bf16 every transfer is bf16 and the step trains (a finite
// loss, every gradient there); with no mixed precision they stay fp32. Before, stages passed fp32
// on: under autocast later stages then ran an fp32 residual stream, without it matmuls failed.
TEST(PipelineActivationDtypeTest, StagesPassTheResidualStreamsDtype) {
  for (const bool mixed : {true, false}) {
    const ParallelDims dims = *ParallelDims::Build(1, 2, 1, 1, 2, 4);
    const at::ScalarType expected = mixed ? at::kBFloat16 : at::kFloat;
    const std::vector<int> statuses = RunMeshRanks(
        dims,
        [&](int rank, const MeshCommunicators& comms) -> int {
          PipelineOptions options;
          options.split.schedule = "1F1B";
          options.split.pp = 2;
          options.microbatches = 2;
          if (mixed) options.parallelize.fsdp_mixed_precision = {at::kBFloat16, at::kFloat};
          absl::StatusOr<DebugPipeline> debug =
              MakeDebugPipeline("llama3", options, dims, comms, rank);
          RANK_EXPECT(debug.ok());
          at::manual_seed(11);
          Batch batch;
          batch.tokens = at::randint(512, {2, 32}, at::kLong);
          batch.labels = at::randint(512, {2, 32}, at::kLong);
          TransferDtypes().clear();
          // Under autocast too, as the trainer runs mixed precision.
          absl::StatusOr<at::Tensor> sum = debug->pipeline->TrainStep(
              batch, HeadLoss{CrossEntropySum(), nullptr}, 64.0,
              mixed ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt);
          RANK_EXPECT(sum.ok());
          RANK_EXPECT(debug->pipeline->FinishBackward().ok());
          RANK_EXPECT(std::isfinite(sum->item<double>()));
          // 2 microbatches: each stage sends and receives 2 tensors (activations or gradients).
          RANK_EXPECT(TransferDtypes().size() == 4);
          for (at::ScalarType dtype : TransferDtypes()) RANK_EXPECT(dtype == expected);
          for (const ParamRef& param : debug->pipeline->params()) {
            RANK_EXPECT(param.tensor->grad().defined());
          }
          return 0;
        },
        [](const std::string& name, std::unique_ptr<Communicator> communicator) {
          return absl::StartsWith(name, "pp/")
                     ? std::unique_ptr<Communicator>(new DtypeRecorder(std::move(communicator)))
                     : std::move(communicator);
        });
    EXPECT_EQ(statuses, std::vector<int>(4, 0)) << (mixed ? "bf16" : "fp32");
  }
}

}  // namespace
}  // namespace titan
