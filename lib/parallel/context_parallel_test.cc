// Context parallelism on forked ranks (lib/parallel/fork_ranks.h) against one process: ring
// attention's output and q/k/v gradients against Attention on the whole sequence, each way of
// exchanging blocks and sharding; a tiny decoder's loss and gradients (with and without op-level
// selective checkpointing) against the same decoder on the whole batch.
#include "lib/parallel/context_parallel.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/tiny_transformer_args.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/parallel/parallelize.h"

namespace titan {
namespace {

double Diff(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs().max() / (want.abs().max() + 1e-6)).item<double>();
}

// fp32: the same sums split into blocks and merged by log-sum-exp (another rounding order).
constexpr double kTolerance = 1e-5;

// (ranks, load balancer, rotate method, documents)
class RingAttentionTest
    : public ::testing::TestWithParam<std::tuple<int, std::string, std::string, bool>> {};

TEST_P(RingAttentionTest, MatchesAttentionOverTheWholeSequence) {
  const auto [world, balancer, method, documents] = GetParam();
  const std::vector<int> statuses = RunRanks(world, [&](int rank, Communicator& comm) {
    constexpr int64_t kBatch = 2, kSeq = 16, kDim = 8;
    at::manual_seed(3);
    const at::Tensor q = at::randn({kBatch, 4, kSeq, kDim});
    const at::Tensor k = at::randn({kBatch, 2, kSeq, kDim});  // grouped-query heads
    const at::Tensor v = at::randn({kBatch, 2, kSeq, kDim});
    const at::Tensor upstream = at::randn({kBatch, 4, kSeq, kDim});
    const at::Tensor positions = at::arange(kSeq, at::kLong).expand({kBatch, kSeq});
    MaskInputs whole{positions, positions, {}, {}, {}};
    if (documents) {
      // Documents of several lengths, cut differently in each row.
      const at::Tensor ids = at::tensor({0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
                                        at::kLong)
                                 .view({kBatch, kSeq});
      whole.query_documents = whole.key_documents = ids;
    }
    at::Tensor q_ref = q.clone().requires_grad_(true);
    at::Tensor k_ref = k.clone().requires_grad_(true);
    at::Tensor v_ref = v.clone().requires_grad_(true);
    const at::Tensor want = Attention(q_ref, k_ref, v_ref, BuildAttentionMask(whole));
    (want * upstream).sum().backward();

    absl::StatusOr<std::unique_ptr<ContextParallel>> cp =
        ContextParallel::Create(&comm, balancer, method);
    RANK_EXPECT(cp.ok());
    absl::StatusOr<at::Tensor> index = (*cp)->LocalPositions(kSeq);
    RANK_EXPECT(index.ok() && index->size(0) == kSeq / world);
    auto local = [&](const at::Tensor& x, int64_t dim) { return x.index_select(dim, *index); };
    at::Tensor q_local = local(q, 2).requires_grad_(true);
    at::Tensor k_local = local(k, 2).requires_grad_(true);
    at::Tensor v_local = local(v, 2).requires_grad_(true);
    MaskInputs mine{local(positions, 1), local(positions, 1), {}, {}, {}};
    if (documents) mine.query_documents = mine.key_documents = local(whole.query_documents, 1);
    const KvRotation rotation = method == "allgather" ? KvRotation::kAllGather : KvRotation::kRing;
    const at::Tensor got = RingAttention(q_local, k_local, v_local, mine, &comm, rotation);
    (got * local(upstream, 2)).sum().backward();
    RANK_EXPECT(Diff(got, local(want, 2)) < kTolerance);
    RANK_EXPECT(Diff(q_local.grad(), local(q_ref.grad(), 2)) < kTolerance);
    RANK_EXPECT(Diff(k_local.grad(), local(k_ref.grad(), 2)) < kTolerance);
    RANK_EXPECT(Diff(v_local.grad(), local(v_ref.grad(), 2)) < kTolerance);
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(world, 0));
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingAttentionTest,
                         ::testing::Values(std::make_tuple(2, "headtail", "allgather", false),
                                           std::make_tuple(2, "headtail", "alltoall", false),
                                           std::make_tuple(4, "headtail", "allgather", false),
                                           std::make_tuple(4, "headtail", "alltoall", true),
                                           std::make_tuple(4, "none", "alltoall", false),
                                           std::make_tuple(2, "none", "allgather", true)));

TEST(ContextParallelTest, ShardsEveryPerTokenTensorAndRefusesUnevenSequences) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    std::unique_ptr<ContextParallel> cp = *ContextParallel::Create(&comm, "headtail", "allgather");
    Batch batch;
    batch.tokens = at::arange(16, at::kLong).view({2, 8});
    batch.labels = batch.tokens + 100;
    batch.documents = batch.tokens / 3;
    batch.extra["advantages"] = batch.tokens.to(at::kFloat);
    absl::StatusOr<Batch> shard = cp->ShardBatch(batch);
    RANK_EXPECT(shard.ok());
    // 4 chunks of 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    const at::Tensor want =
        rank == 0 ? at::tensor({0, 1, 6, 7}, at::kLong) : at::tensor({2, 3, 4, 5}, at::kLong);
    RANK_EXPECT(at::equal(shard->positions, want.expand({2, 4})));
    RANK_EXPECT(at::equal(shard->tokens[1], want + 8));
    RANK_EXPECT(at::equal(shard->labels, batch.labels.index_select(1, want)));
    RANK_EXPECT(at::equal(shard->documents, batch.documents.index_select(1, want)));
    RANK_EXPECT(at::equal(shard->extra.at("advantages"), (shard->tokens).to(at::kFloat)));
    const absl::StatusOr<at::Tensor> uneven = cp->LocalPositions(6);
    RANK_EXPECT(!uneven.ok() && uneven.status().message() ==
                                    "context parallelism over 2 ranks (headtail) needs sequences "
                                    "of a multiple of 4 tokens, got 6");
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

TransformerArgs TinyArgs() { return TinyTransformerArgs(32, 40, 16); }

std::unique_ptr<Decoder> Build() {
  at::manual_seed(1);
  auto model = std::make_unique<Decoder>(TinyArgs(), at::TensorOptions().dtype(at::kFloat));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  return model;
}

// (selective op-level checkpointing, rotate method)
class ContextParallelDecoderTest : public ::testing::TestWithParam<std::tuple<bool, std::string>> {
};

TEST_P(ContextParallelDecoderTest, LossAndGradientsMatchOneProcess) {
  const auto [op_checkpointing, method] = GetParam();
  const std::vector<int> statuses = RunRanks(2, [&](int rank, Communicator& comm) {
    at::manual_seed(9);
    Batch batch;
    batch.tokens = at::randint(TinyArgs().vocab_size, {2, 16}, at::kLong);
    batch.labels = at::randint(TinyArgs().vocab_size, {2, 16}, at::kLong);
    std::unique_ptr<Decoder> reference = Build();
    const at::Tensor want = CrossEntropySum()(reference->Forward(batch.tokens), batch);
    want.backward();

    std::unique_ptr<Decoder> model = Build();
    std::unique_ptr<ContextParallel> cp = *ContextParallel::Create(&comm, "headtail", method);
    cp->Apply(*model);
    if (op_checkpointing) RANK_EXPECT(ApplyActivationCheckpointing(*model, "selective", "op").ok());
    const Batch shard = *cp->ShardBatch(batch);
    DecoderInputs inputs;
    inputs.positions = shard.positions;
    at::Tensor got = CrossEntropySum()(model->Forward(shard.tokens, inputs), shard);
    got.backward();
    // Each rank's loss covers its tokens: the sums over ranks are the whole batch's.
    RANK_EXPECT(Await(comm.AllReduce(got, ReduceOp::kSum)).ok());
    RANK_EXPECT(Diff(got.detach(), want) < kTolerance);
    std::vector<ParamRef> whole = reference->NamedParameters();
    std::vector<ParamRef> local = model->NamedParameters();
    for (size_t i = 0; i < whole.size(); ++i) {
      at::Tensor grad = local[i].tensor->grad().clone();
      RANK_EXPECT(Await(comm.AllReduce(grad, ReduceOp::kSum)).ok());
      if (Diff(grad, whole[i].tensor->grad()) >= kTolerance) {
        std::fprintf(stderr, "rank %d: %s: gradient differs by %g\n", rank, local[i].name.c_str(),
                     Diff(grad, whole[i].tensor->grad()));
        return 1;
      }
    }
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

INSTANTIATE_TEST_SUITE_P(Policies, ContextParallelDecoderTest,
                         ::testing::Values(std::make_tuple(false, "allgather"),
                                           std::make_tuple(true, "alltoall")));

}  // namespace
}  // namespace titan
