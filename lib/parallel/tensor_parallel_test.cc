// Tensor parallelism on 2 forked ranks against the same model unsharded in each rank
// (lib/parallel/fork_ranks.h): loss and every gradient, with and without sequence parallelism and
// loss parallelism, for a Llama-like and a Qwen3-like (qk-norm, tied) tiny decoder.
#include "lib/parallel/tensor_parallel.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/tiny_transformer_args.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/parallel/loss_parallel.h"

namespace titan {
namespace {

TransformerArgs TinyArgs(bool qwen) { return TinyTransformerArgs(32, 64, 16, qwen); }

std::unique_ptr<Decoder> Build(const TransformerArgs& args) {
  at::manual_seed(1);  // every rank and both models get the same weights
  auto model = std::make_unique<Decoder>(args, at::TensorOptions().dtype(at::kFloat));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  return model;
}

// Relative difference, with an absolute floor for gradients near zero.
double Diff(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs().max() / (want.abs().max() + 1e-6)).item<double>();
}

// (qwen, sequence parallel, loss parallel, label smoothing, the head fused with the loss)
class TensorParallelTest
    : public ::testing::TestWithParam<std::tuple<bool, bool, bool, double, bool>> {};

TEST_P(TensorParallelTest, LossAndGradientsMatchOneProcess) {
  const auto [qwen, sequence_parallel, loss_parallel, smoothing, fused] = GetParam();
  const std::vector<int> statuses = RunRanks(2, [&](int rank, Communicator& comm) {
    const TransformerArgs args = TinyArgs(qwen);
    at::manual_seed(7);
    Batch batch;
    batch.tokens = at::randint(args.vocab_size, {2, 8}, at::kLong);
    batch.labels = at::randint(args.vocab_size, {2, 8}, at::kLong);
    batch.labels[1][3] = kIgnoreIndex;

    std::unique_ptr<Decoder> reference = Build(args);
    const at::Tensor want = CrossEntropySum(smoothing)(reference->Forward(batch.tokens), batch);
    want.backward();

    std::unique_ptr<Decoder> model = Build(args);
    TensorParallelOptions options;
    options.sequence_parallel = sequence_parallel;
    options.loss_parallel = loss_parallel;
    absl::StatusOr<std::unique_ptr<TensorParallel>> tp =
        TensorParallel::Apply(*model, options, &comm);
    RANK_EXPECT(tp.ok());
    (*tp)->ShardParameters(model->NamedParameters());
    at::Tensor got;
    if (fused) {
      // The head's weight holds this rank's vocabulary rows; chunks of 5 of the 16 tokens.
      got = ChunkedCrossEntropySum(5, &comm)(model->HeadInput(model->ForwardHidden(batch.tokens)),
                                             model->OutputWeight(), batch);
    } else {
      const at::Tensor logits = model->Forward(batch.tokens);
      RANK_EXPECT(logits.size(-1) == (loss_parallel ? args.vocab_size / 2 : args.vocab_size));
      const LossFn loss_fn = loss_parallel ? VocabParallelCrossEntropySum(&comm, smoothing)
                                           : CrossEntropySum(smoothing);
      got = loss_fn(logits, batch);
    }
    got.backward();
    RANK_EXPECT((*tp)->ReduceReplicatedGradients().ok());

    // fp32 sums in another order (partial matmuls added across ranks, log-sum-exp over shards).
    constexpr double kTolerance = 1e-5;
    RANK_EXPECT(Diff(got, want) < kTolerance);
    std::vector<ParamRef> whole = reference->NamedParameters();
    std::vector<ParamRef> local = model->NamedParameters();
    RANK_EXPECT(whole.size() == local.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      at::Tensor expected = whole[i].tensor->grad();
      const at::Tensor& param = *local[i].tensor;
      if (const TensorParallelShard* shard = (*tp)->ShardOf(local[i].name, param.sizes())) {
        RANK_EXPECT(shard->global_shape == whole[i].tensor->sizes().vec());
        expected = expected.narrow(shard->dim, shard->offset, param.size(shard->dim));
        RANK_EXPECT(at::equal(
            param, whole[i].tensor->narrow(shard->dim, shard->offset, param.size(shard->dim))));
      }
      if (Diff(param.grad(), expected) >= kTolerance) {
        std::fprintf(stderr, "rank %d: %s: gradient differs by %g\n", rank, local[i].name.c_str(),
                     Diff(param.grad(), expected));
        return 1;
      }
    }
    // Split parameters are counted on every rank, replicated ones on rank 0 only.
    RANK_EXPECT((*tp)->OwnsCopy("layers.0.attention.wq.weight.exp_avg"));
    RANK_EXPECT((*tp)->OwnsCopy("layers.0.ffn_norm.weight") == (rank == 0));
    // The whole of a split parameter, from every rank's slice.
    for (size_t i = 0; i < whole.size(); ++i) {
      if (local[i].name != "layers.1.feed_forward.w2.weight") continue;
      const TensorParallelShard* shard = (*tp)->ShardOf(local[i].name, local[i].tensor->sizes());
      RANK_EXPECT(shard != nullptr && shard->dim == 1);
      absl::StatusOr<at::Tensor> gathered = (*tp)->GatherFull(*shard, *local[i].tensor);
      RANK_EXPECT(gathered.ok() && at::equal(*gathered, *whole[i].tensor));
    }
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelTest,
                         ::testing::Values(std::make_tuple(false, false, false, 0.0, false),
                                           std::make_tuple(false, true, false, 0.0, false),
                                           std::make_tuple(false, false, true, 0.0, false),
                                           std::make_tuple(false, true, true, 0.1, false),
                                           std::make_tuple(true, false, true, 0.0, false),
                                           std::make_tuple(true, true, true, 0.0, false),
                                           std::make_tuple(true, true, false, 0.1, false),
                                           std::make_tuple(false, true, true, 0.0, true),
                                           std::make_tuple(true, false, true, 0.0, true)));

TEST(TensorParallelCheckTest, RefusesSizesTheDegreeDoesNotDivide) {
  TransformerArgs args = TinyArgs(false);
  EXPECT_TRUE(TensorParallel::CheckDivisible(args, 2).ok());
  const absl::Status heads = TensorParallel::CheckDivisible(args, 8);
  EXPECT_EQ(heads.message(),
            "[parallelism] tensor_parallel_degree=8 does not "
            "divide the model's attention heads "
            "(4)");
  EXPECT_NE(TensorParallel::CheckDivisible(args, 4).message().find("key/value heads (2)"),
            std::string::npos);
  args.n_kv_heads = 4;
  args.ffn_hidden_dim = 50;
  EXPECT_NE(TensorParallel::CheckDivisible(args, 4).message().find("feed-forward hidden size (50)"),
            std::string::npos);
  args.ffn_hidden_dim = 48;
  args.vocab_size = 66;
  EXPECT_NE(TensorParallel::CheckDivisible(args, 4).message().find("vocabulary size (66)"),
            std::string::npos);
}

}  // namespace
}  // namespace titan
