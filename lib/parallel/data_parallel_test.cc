// FSDP and DDP gradient synchronisation across real ranks (lib/parallel/fork_ranks.h).
#include "lib/parallel/data_parallel.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/float8/float8_linear.h"
#include "lib/parallel/ddp.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/parallel/fsdp.h"
#include "lib/parallel/tensor_parallel.h"
#include "lib/profiling/host_read_counter.h"

namespace titan {
namespace {

bool Equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a, b);
}

// A GatherFull sink that keeps every whole tensor.
ShardedState::WholeTensorSink CollectInto(NamedTensors& kept) {
  return [&kept](const std::string& name, const at::Tensor& whole) {
    kept.emplace_back(name, whole);
    return absl::OkStatus();
  };
}

// 3 ranks: dim 0 of 5 splits 2 + 2 + 1 (one padding row), of 2 splits 1 + 1 + 0 (all padding).
TEST(FsdpParamGroupTest, ShardsGathersAndReduceScattersWithPadding) {
  const std::vector<int> statuses = RunRanks(3, [](int rank, Communicator& comm) {
    at::manual_seed(0);  // every rank initialises the same full tensors
    const at::Tensor full_a = at::randn({5, 3});
    const at::Tensor full_b = at::randn({2});
    const at::Tensor weight_a = at::randn({5, 3});
    const at::Tensor weight_b = at::randn({2});
    at::Tensor a = full_a.clone().requires_grad_(true);
    at::Tensor b = full_b.clone().requires_grad_(true);
    std::unique_ptr<FsdpParamGroup> group =
        *FsdpParamGroup::Create({{"a", &a}, {"b", &b}}, &comm, /*replicate=*/nullptr);
    const FsdpParamGroup::Param& pa = group->params()[0];
    const FsdpParamGroup::Param& pb = group->params()[1];
    RANK_EXPECT(a.sizes() == at::IntArrayRef({2, 3}) && a.is_leaf() && a.requires_grad());
    RANK_EXPECT(b.sizes() == at::IntArrayRef({1}));
    const int64_t rows_a = rank < 2 ? 2 : 1;
    RANK_EXPECT(Equal(a.narrow(0, 0, rows_a), full_a.narrow(0, 2 * rank, rows_a)));
    if (rank == 2) RANK_EXPECT(Equal(a[1], at::zeros({3})) && Equal(b, at::zeros({1})));

    group->Unshard();
    RANK_EXPECT(Equal(a, full_a) && Equal(b, full_b));
    // Rank r's loss weighs its gradient by r + 1: the synchronised gradient is the mean, 2x.
    at::Tensor loss = (rank + 1) * ((a * weight_a).sum() + (b * weight_b).sum());
    group->Reshard();
    RANK_EXPECT(a.sizes() == at::IntArrayRef({2, 3}));
    loss.backward();
    RANK_EXPECT(at::allclose(a.grad(), group->ShardOf(pa, 2 * weight_a)));
    RANK_EXPECT(at::allclose(b.grad(), group->ShardOf(pb, 2 * weight_b)));

    absl::StatusOr<at::Tensor> gathered = group->GatherFull(pa, a.detach());
    RANK_EXPECT(gathered.ok() && Equal(*gathered, full_a));
    RANK_EXPECT(!group->GatherFull(pa, b.detach()).ok());

    // Checkpoint helpers: optimizer-like state "<param>.<state>" is sharded alike, scalars pass.
    std::vector<std::unique_ptr<FsdpParamGroup>> groups;
    groups.push_back(std::move(group));
    DataParallel dp(std::move(groups), /*root=*/nullptr, /*reshard_root=*/false,
                    /*first_in_backward=*/nullptr, &comm);
    const NamedTensors local = {{"a", a.detach()},
                                {"a.exp_avg", a.detach() * 2},
                                {"a.step", at::scalar_tensor(3, at::kLong)}};
    NamedTensors full;
    RANK_EXPECT(dp.GatherFull(local, CollectInto(full)).ok());
    RANK_EXPECT(full.size() == 3 && Equal(full[0].second, full_a) &&
                Equal(full[1].second, full_a * 2) && Equal(full[2].second, local[2].second));
    TensorBoxes boxes;
    const NamedTensors pieces = dp.CheckpointPieces(local, boxes);
    RANK_EXPECT(pieces.size() == 3 && boxes.size() == 2 && boxes.count("a.step") == 0);
    RANK_EXPECT(Equal(pieces[1].second, full_a.narrow(0, 2 * rank, rows_a) * 2));
    RANK_EXPECT(boxes["a.exp_avg"].global_shape == std::vector<int64_t>({5, 3}) &&
                boxes["a.exp_avg"].offsets == std::vector<int64_t>({2 * rank, 0}));
    RANK_EXPECT(pieces[2].second.is_same(local[2].second));
    pieces[0].second.fill_(7);  // A view: loading into the piece fills the shard.
    RANK_EXPECT(Equal(a.detach().narrow(0, 0, rows_a), at::full({rows_a, 3}, 7.0)));
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(3, 0));
}

// A prefetched gather is what the next Unshard uses: it holds the shards as they were when the
// prefetch started; a dropped one leaves the next Unshard to gather afresh.
TEST(FsdpParamGroupTest, PrefetchFeedsTheNextUnshard) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(5);
    const at::Tensor full_a = at::randn({4, 3});
    at::Tensor a = full_a.clone().requires_grad_(true);
    std::unique_ptr<FsdpParamGroup> group = *FsdpParamGroup::Create({{"a", &a}}, &comm, nullptr);
    const at::Tensor shard = a;
    group->Prefetch();
    group->Prefetch();  // A second call while one is pending is a no-op.
    {
      c10::NoGradGuard no_grad;
      shard.add_(1);  // After the prefetch started: not in what it gathered.
    }
    group->Unshard();
    RANK_EXPECT(Equal(a, full_a));
    group->Reshard();
    group->Prefetch();
    group->DropPrefetch();
    group->Unshard();  // Gathers afresh: the shards as they are now.
    RANK_EXPECT(Equal(a, full_a + 1));
    group->Reshard();
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// Mixed precision: the full parameters are the shards cast to bf16 (gathered as bf16), and the
// gradients are reduced in fp32 into fp32 shards.
TEST(FsdpParamGroupTest, MixedPrecisionGathersInParamDtypeAndReducesInReduceDtype) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(3);
    const at::Tensor full_a = at::randn({4, 3});
    const at::Tensor weight = at::randn({4, 3});
    at::Tensor a = full_a.clone().requires_grad_(true);
    std::unique_ptr<FsdpParamGroup> group =
        *FsdpParamGroup::Create({{"a", &a}}, &comm, nullptr, {at::kBFloat16, at::kFloat});
    const FsdpParamGroup::Param& pa = group->params()[0];
    RANK_EXPECT(a.scalar_type() == at::kFloat);
    group->Unshard();
    RANK_EXPECT(a.scalar_type() == at::kBFloat16 && Equal(a, full_a.to(at::kBFloat16)));
    // Rank r's bf16 gradient is (r + 1) * weight in bf16; the fp32 mean of the two is 1.5x that.
    at::Tensor loss = (rank + 1) * (a * weight.to(at::kBFloat16)).sum();
    group->Reshard();
    loss.backward();
    RANK_EXPECT(a.grad().scalar_type() == at::kFloat);
    const at::Tensor expected =
        (weight.to(at::kBFloat16).to(at::kFloat) + (2 * weight.to(at::kBFloat16)).to(at::kFloat)) /
        2;
    RANK_EXPECT(Equal(a.grad(), group->ShardOf(pa, expected)));
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// Overlapped reduce-scatters: a group's gradients land when the next group's start or at Drain,
// the same values as reducing in place, and accumulate over backward passes.
TEST(FsdpReduceScatterQueueTest, FinishesAGroupWhenTheNextStartsAndWhenBackwardEnds) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(0);
    const at::Tensor weight_a = at::randn({4, 3});
    const at::Tensor weight_b = at::randn({2, 2});
    at::Tensor a = at::randn({4, 3}).requires_grad_(true);
    at::Tensor b = at::randn({2, 2}).requires_grad_(true);
    std::unique_ptr<FsdpParamGroup> group_a = *FsdpParamGroup::Create({{"a", &a}}, &comm, nullptr);
    std::unique_ptr<FsdpParamGroup> group_b = *FsdpParamGroup::Create({{"b", &b}}, &comm, nullptr);
    FsdpReduceScatterQueue queue;
    group_a->set_reduce_scatter_queue(&queue);
    group_b->set_reduce_scatter_queue(&queue);
    // Outside a backward pass: b's collective finishes when a's starts; a's waits for Drain.
    queue.Issue(*group_b, {(rank + 1) * weight_b});
    RANK_EXPECT(!b.grad().defined());
    queue.Issue(*group_a, {(rank + 1) * weight_a});
    RANK_EXPECT(at::allclose(b.grad(), group_b->ShardOf(group_b->params()[0], 1.5 * weight_b)));
    RANK_EXPECT(!a.grad().defined());
    RANK_EXPECT(queue.Drain().ok());
    RANK_EXPECT(at::allclose(a.grad(), group_a->ShardOf(group_a->params()[0], 1.5 * weight_a)));
    const auto backward = [&] {
      group_a->Unshard();
      group_b->Unshard();
      // b's all-gather is the later node: its backward (and reduce-scatter) runs first.
      at::Tensor loss = (rank + 1) * ((a * weight_a).sum() + (b * weight_b).sum());
      group_a->Reshard();
      group_b->Reshard();
      loss.backward();
    };
    // In a backward pass the last group's collective (a's) finishes when the pass ends, not at
    // the next microbatch: its full gradients are not held through the next forward.
    backward();
    RANK_EXPECT(at::allclose(a.grad(), group_a->ShardOf(group_a->params()[0], 3 * weight_a)));
    RANK_EXPECT(at::allclose(b.grad(), group_b->ShardOf(group_b->params()[0], 3 * weight_b)));
    backward();  // a second microbatch adds to the gradients
    RANK_EXPECT(at::allclose(a.grad(), group_a->ShardOf(group_a->params()[0], 4.5 * weight_a)));
    RANK_EXPECT(at::allclose(b.grad(), group_b->ShardOf(group_b->params()[0], 4.5 * weight_b)));
    RANK_EXPECT(queue.Drain().ok());  // nothing left in flight
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// HSDP (2 replicas of 2 shards): a finished reduce-scatter's all-reduce over the replicas is
// started, not awaited, when the next group's reduce-scatter starts, and finished at the next
// Issue or Drain; the gradients are the mean over all 4 ranks.
TEST(FsdpReduceScatterQueueTest, HsdpAllReduceOverlapsTheNextGroupsReduceScatter) {
  const ParallelDims dims = *ParallelDims::Build(2, 2, 1, 1, 1, 4);
  const std::vector<int> statuses =
      RunMeshRanks(dims, [](int rank, const MeshCommunicators& comms) {
        Communicator& shard = comms.Get(MeshGroup::kDpShard);
        Communicator& replicate = comms.Get(MeshGroup::kDpReplicate);
        at::manual_seed(0);
        const at::Tensor weight_a = at::randn({4, 3});
        const at::Tensor weight_b = at::randn({2, 2});
        at::Tensor a = at::randn({4, 3}).requires_grad_(true);
        at::Tensor b = at::randn({2, 2}).requires_grad_(true);
        std::unique_ptr<FsdpParamGroup> group_a =
            *FsdpParamGroup::Create({{"a", &a}}, &shard, &replicate);
        std::unique_ptr<FsdpParamGroup> group_b =
            *FsdpParamGroup::Create({{"b", &b}}, &shard, &replicate);
        FsdpReduceScatterQueue queue;
        queue.Issue(*group_b, {(rank + 1) * weight_b});
        queue.Issue(*group_a, {(rank + 1) * weight_a});
        RANK_EXPECT(!b.grad().defined());  // all-reducing over the replicas, not yet added
        RANK_EXPECT(queue.Drain().ok());
        RANK_EXPECT(at::allclose(b.grad(), group_b->ShardOf(group_b->params()[0], 2.5 * weight_b)));
        RANK_EXPECT(at::allclose(a.grad(), group_a->ShardOf(group_a->params()[0], 2.5 * weight_a)));
        return 0;
      });
  EXPECT_EQ(statuses, std::vector<int>(4, 0));
}

// Resharding after forward frees the gathered bytes autograd saved and gathers them again in
// backward, freed once more when the group's gradients are computed (while the graph lives on):
// the gradients are those of keeping them.
TEST(FsdpParamGroupTest, ReshardAfterForwardFreesAndRegathersForBackward) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    std::vector<at::Tensor> grads[2];
    for (const bool reshard : {false, true}) {
      at::manual_seed(0);
      at::Tensor a = at::randn({5, 3}).requires_grad_(true);
      const at::Tensor x = at::randn({4, 3}) * (rank + 1);
      std::unique_ptr<FsdpParamGroup> group =
          *FsdpParamGroup::Create({{"a", &a}}, &comm, /*replicate=*/nullptr);
      at::Tensor seen;  // the full tensor the call computed with
      at::Tensor out = group->CallUnsharded(
          [&a, &seen](const at::Tensor& y) {
            seen = a;
            return at::matmul(y, a.t()).tanh();
          },
          x, reshard);
      RANK_EXPECT(seen.sizes() == at::IntArrayRef({5, 3}));
      RANK_EXPECT((seen.storage().nbytes() == 0) == reshard);
      out.sum().backward();
      RANK_EXPECT((seen.storage().nbytes() == 0) == reshard);
      grads[reshard].push_back(a.grad());
    }
    RANK_EXPECT(Equal(grads[0][0], grads[1][0]));
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// Float8 all-gather: the float8 linear computes from the gathered cast in forward and in the
// backward's re-gather, and the slot holds a one-element stand-in, never a high-precision copy of
// the weight. Outputs and gradients equal the float8 linear on the whole weight, bit for bit.
TEST(FsdpParamGroupTest, Float8GatherKeepsNoHighPrecisionWeight) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(0);  // the same weight and input on both ranks: the mean gradient is one's
    const at::Tensor full = at::randn({6, 32});
    const at::Tensor x = at::randn({4, 32});
    Float8LinearOptions options;
    options.emulate = true;
    const at::Tensor want_weight = full.clone().requires_grad_(true);
    const at::Tensor want = Float8Linear(x, want_weight, options);
    want.sum().backward();

    at::Tensor w = full.clone().requires_grad_(true);
    FsdpFloat8Params float8;
    float8.names = {"w"};
    std::unique_ptr<FsdpParamGroup> group =
        *FsdpParamGroup::Create({{"w", &w}}, &comm, /*replicate=*/nullptr, {}, float8);
    std::vector<int64_t> seen_shape;
    size_t seen_bytes = 0;  // while the call computes; afterwards resharding frees them anyway
    const at::Tensor out = group->CallUnsharded(
        [&w, &seen_shape, &seen_bytes, &options](const at::Tensor& y) {
          seen_shape = w.sizes().vec();
          seen_bytes = w.storage().nbytes();
          return Float8Linear(y, w, options);
        },
        x, /*reshard_after_forward=*/true);
    RANK_EXPECT(seen_shape == std::vector<int64_t>({6, 32}));
    RANK_EXPECT(seen_bytes == sizeof(float));
    RANK_EXPECT(Equal(out, want));
    out.sum().backward();
    RANK_EXPECT(Equal(w.grad(), group->ShardOf(group->params()[0], want_weight.grad())));
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

int g_copies = 0;         // aten::copy_ calls on the rank's thread while counted
bool g_counting = false;  // off inside the collectives: Gloo's own copies grow with the ranks

std::unique_ptr<at::ObserverContext> CountCopy(const at::RecordFunction& fn) {
  if (g_counting && std::string_view(fn.name()) == "aten::copy_") ++g_copies;
  return nullptr;
}

// A finished operation's Work.
class DoneWork : public Work {
 public:
  explicit DoneWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool IsCompleted() override { return true; }

 private:
  absl::Status status_;
};

// Runs the collectives to the end when they start, with copies not counted.
class UncountedCollectives : public ForwardingCommunicator {
 public:
  explicit UncountedCollectives(Communicator* inner) : ForwardingCommunicator(inner) {}
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    return Uncounted([&] { return inner()->AllGather(input, output); });
  }
  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    return Uncounted([&] { return inner()->ReduceScatter(input, output, op); });
  }

 private:
  static std::unique_ptr<Work> Uncounted(
      const std::function<absl::StatusOr<std::unique_ptr<Work>>()>& start) {
    const bool counting = std::exchange(g_counting, false);
    const absl::Status status = Await(start());
    g_counting = counting;
    return std::make_unique<DoneWork>(status);
  }
};

// Packing for and unpacking from the collectives takes one copy per parameter each way (FSDP2's
// split_with_sizes_copy copy-out and _chunk_cat copy-in), at 2 ranks as at 8, not one per
// parameter and rank: on CUDA a copy is a kernel launch, at 64 ranks hundreds a layer. The
// first microbatch's shard gradients are the reduce-scatter output's rows, not copies of them.
TEST(FsdpParamGroupTest, GatherAndReduceScatterCopiesDoNotGrowWithRanks) {
  for (const int world : {2, 8}) {
    const std::vector<int> statuses = RunRanks(world, [](int rank, Communicator& comm) {
      UncountedCollectives uncounted(&comm);
      at::manual_seed(0);
      // Padding on the last ranks: 5 rows and 2 split over 2 ranks or 8.
      at::Tensor a = at::randn({5, 3}).requires_grad_(true);
      at::Tensor b = at::randn({2}).requires_grad_(true);
      at::Tensor c = at::randn({8, 4}).requires_grad_(true);
      const std::vector<at::Tensor> full = {a.detach().clone(), b.detach().clone(),
                                            c.detach().clone()};
      std::unique_ptr<FsdpParamGroup> group = *FsdpParamGroup::Create(
          {{"a", &a}, {"b", &b}, {"c", &c}}, &uncounted, /*replicate=*/nullptr);
      const at::CallbackHandle handle = at::addThreadLocalCallback(
          at::RecordFunctionCallback(&CountCopy).scopes({at::RecordScope::FUNCTION}));
      g_counting = true;
      const HostReadCounter host_reads;
      group->Unshard();
      const int gather_copies = std::exchange(g_copies, 0);
      const std::vector<at::Tensor> grads = group->ReduceScatterGrads(full);
      const int reduce_scatter_copies = std::exchange(g_copies, 0);
      group->AccumulateShardGrads(grads);
      const int accumulate_copies = g_copies;
      RANK_EXPECT(host_reads.reads() == 0);  // nothing waits for a GPU's values
      g_counting = false;
      at::removeCallback(handle);
      RANK_EXPECT(Equal(a, full[0]) && Equal(b, full[1]) && Equal(c, full[2]));
      for (int i = 0; i < 3; ++i) {  // the mean of equal gradients: sums of 8 round
        RANK_EXPECT(at::allclose(grads[i], group->ShardOf(group->params()[i], full[i])));
        RANK_EXPECT(Equal(group->params()[i].shard.grad(), grads[i]));
      }
      RANK_EXPECT(gather_copies <= 2 * 3);  // into the send buffer, out of the gathered one
      RANK_EXPECT(reduce_scatter_copies <= 3);
      RANK_EXPECT(accumulate_copies == 0);  // a first gradient adopts the reduced rows
      return 0;
    });
    EXPECT_EQ(statuses, std::vector<int>(world, 0)) << world << " ranks";
  }
}

// Two calls of one group; the second's backward runs as far as its input only (a zero-bubble
// pipeline's I pass, which refills but does not reach the gather), then the first's whole
// backward: each call frees only what its own backward gathered again.
TEST(FsdpParamGroupTest, EachCallFreesOnlyWhatItsOwnBackwardGathered) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(rank);
    at::Tensor a = at::randn({5, 3}).requires_grad_(true);
    std::unique_ptr<FsdpParamGroup> group =
        *FsdpParamGroup::Create({{"a", &a}}, &comm, /*replicate=*/nullptr);
    const at::Tensor x_later = at::randn({4, 3}).requires_grad_(true);
    at::Tensor seen[2];
    at::Tensor out[2];
    for (int i : {0, 1}) {
      out[i] = group->CallUnsharded(
          [&a, &seen, i](const at::Tensor& y) {
            seen[i] = a;
            return at::matmul(y, a.t()).tanh();
          },
          i == 0 ? at::randn({4, 3}) : x_later, /*reshard_after_forward=*/true);
    }
    torch::autograd::grad({out[1].sum()}, {x_later}, {}, /*retain_graph=*/true);
    RANK_EXPECT(seen[1].storage().nbytes() > 0);
    out[0].sum().backward();
    RANK_EXPECT(seen[0].storage().nbytes() == 0);
    RANK_EXPECT(seen[1].storage().nbytes() > 0);  // still there for its weight gradients
    out[1].sum().backward();
    RANK_EXPECT(seen[1].storage().nbytes() == 0);
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// FSDP 2 × TP 2 (4 ranks): FSDP shards each rank's tensor-parallel slice; the full tensors
// gathered back are the model's, and each checkpoint piece sits at its box's offsets in the whole
// tensor (FSDP rows inside tensor-parallel rows or columns); a piece of a replicated parameter is
// written by one tensor-parallel rank.
TEST(DataParallelTest, FsdpShardsOfTensorParallelSlicesGatherAndBoxIntoWholeTensors) {
  const ParallelDims dims = *ParallelDims::Build(1, 2, 1, 2, 1, 4);
  const std::vector<int> statuses =
      RunMeshRanks(dims, [](int rank, const MeshCommunicators& comms) {
        Communicator& tp_group = comms.Get(MeshGroup::kTp);
        Communicator& shard_group = comms.Get(MeshGroup::kDpShard);
        TransformerArgs args;
        args.dim = 8;
        args.n_layers = 1;
        args.n_heads = 2;
        args.vocab_size = 6;
        args.ffn_hidden_dim = 6;
        args.max_seq_len = 4;
        at::manual_seed(0);
        Decoder model(args, at::TensorOptions().dtype(at::kFloat));
        model.Materialize(at::TensorOptions().dtype(at::kFloat));
        model.InitWeights();
        NamedTensors whole;
        for (const ParamRef& p : model.NamedParameters())
          whole.emplace_back(p.name, p.tensor->clone());
        std::unique_ptr<TensorParallel> tp = *TensorParallel::Apply(model, {}, &tp_group);
        tp->ShardParameters(model.NamedParameters());
        std::vector<std::unique_ptr<FsdpParamGroup>> groups;
        groups.push_back(*FsdpParamGroup::Create(model.NamedParameters(), &shard_group, nullptr));
        DataParallel dp(std::move(groups), /*root=*/nullptr, /*reshard_root=*/false,
                        /*first_in_backward=*/nullptr, &shard_group);
        dp.SetModelParallel(std::move(tp), nullptr);
        NamedTensors local;
        for (const ParamRef& p : model.NamedParameters()) local.emplace_back(p.name, *p.tensor);
        NamedTensors full;
        RANK_EXPECT(dp.GatherFull(local, CollectInto(full)).ok());
        RANK_EXPECT(full.size() == whole.size());
        TensorBoxes boxes;
        const NamedTensors pieces = dp.CheckpointPieces(local, boxes);
        for (size_t i = 0; i < whole.size(); ++i) {
          RANK_EXPECT(Equal(full[i].second, whole[i].second));
          const TensorBox& box = boxes.at(pieces[i].first);
          RANK_EXPECT(box.global_shape == whole[i].second.sizes().vec());
          at::Tensor expected = whole[i].second;
          for (int64_t d = 0; d < expected.dim(); ++d) {
            expected = expected.narrow(d, box.offsets[d], pieces[i].second.size(d));
          }
          RANK_EXPECT(Equal(pieces[i].second, expected));
        }
        const int64_t t = tp_group.rank();
        const int64_t f = shard_group.rank();
        // wq: 8 rows, 4 per tensor-parallel rank, 2 of those per FSDP rank.
        RANK_EXPECT(boxes.at("layers.0.attention.wq.weight").offsets ==
                    std::vector<int64_t>({4 * t + 2 * f, 0}));
        // wo: tensor-parallel columns, FSDP rows.
        RANK_EXPECT(boxes.at("layers.0.attention.wo.weight").offsets ==
                    std::vector<int64_t>({4 * f, 4 * t}));
        RANK_EXPECT(dp.WritesPiece("layers.0.attention.wo.weight.exp_avg"));
        RANK_EXPECT(dp.WritesPiece("norm.weight") == (t == 0));
        return 0;
      });
  EXPECT_EQ(statuses, std::vector<int>(4, 0));
}

// Runs every operation on `inner` and records the collectives' names in the order they started.
class RecordingCommunicator : public ForwardingCommunicator {
 public:
  explicit RecordingCommunicator(Communicator* inner) : ForwardingCommunicator(inner) {}
  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    log.push_back("all_reduce");
    return inner()->AllReduce(tensor, op);
  }
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    log.push_back("all_gather");
    return inner()->AllGather(input, output);
  }
  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    log.push_back("reduce_scatter");
    return inner()->ReduceScatter(input, output, op);
  }

  std::vector<std::string> log;
};

// Backward prefetch: when backward reaches the second of two resharded groups, it gathers that
// group and at once starts the first group's gather, before reduce-scattering its own gradients;
// the first group then computes with the prefetched parameters (the gradients of no prefetch).
TEST(FsdpParamGroupTest, BackwardPrefetchStartsTheNextGroupsGatherFirst) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    RecordingCommunicator recording(&comm);
    std::vector<at::Tensor> grads[2];
    for (const bool prefetch : {false, true}) {
      at::manual_seed(0);
      at::Tensor a = at::randn({4, 3}).requires_grad_(true);
      at::Tensor b = at::randn({3, 4}).requires_grad_(true);
      const at::Tensor x = at::randn({2, 3}) * (rank + 1);
      std::unique_ptr<FsdpParamGroup> first =
          *FsdpParamGroup::Create({{"a", &a}}, &recording, /*replicate=*/nullptr);
      std::unique_ptr<FsdpParamGroup> second =
          *FsdpParamGroup::Create({{"b", &b}}, &recording, /*replicate=*/nullptr);
      const at::Tensor y = first->CallUnsharded(
          [&a](const at::Tensor& in) { return at::matmul(in, a.t()).tanh(); }, x,
          /*reshard_after_forward=*/true);
      const at::Tensor z = second->CallUnsharded(
          [&b](const at::Tensor& in) { return at::matmul(in, b.t()).tanh(); }, y,
          /*reshard_after_forward=*/true, /*prefetch=*/nullptr,
          /*backward_prefetch=*/prefetch ? first.get() : nullptr);
      recording.log.clear();
      z.sum().backward();
      const std::vector<std::string> want =
          prefetch ? std::vector<std::string>{"all_gather", "all_gather", "reduce_scatter",
                                              "reduce_scatter"}
                   : std::vector<std::string>{"all_gather", "reduce_scatter", "all_gather",
                                              "reduce_scatter"};
      RANK_EXPECT(recording.log == want);
      grads[prefetch] = {a.grad(), b.grad()};
    }
    RANK_EXPECT(Equal(grads[0][0], grads[1][0]) && Equal(grads[0][1], grads[1][1]));
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

TEST(DdpGradientReducerTest, AveragesAccumulatedGradientsOnTheLastMicrobatchInBuckets) {
  const std::vector<int> statuses = RunRanks(2, [](int rank, Communicator& comm) {
    at::manual_seed(0);
    std::vector<at::Tensor> params = {at::randn({4}).requires_grad_(true),
                                      at::randn({3, 2}).requires_grad_(true),
                                      at::randn({100}).requires_grad_(true)};
    std::vector<at::Tensor> weights;
    for (const at::Tensor& p : params) weights.push_back(at::randn(p.sizes()));
    std::unique_ptr<DdpGradientReducer> ddp =
        *DdpGradientReducer::Create(params, &comm, /*bucket_cap_bytes=*/16);
    RANK_EXPECT(ddp->num_buckets() == 3);
    for (int step = 0; step < 2; ++step) {
      for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
      for (int microbatch = 0; microbatch < 2; ++microbatch) {
        ddp->set_sync(microbatch == 1);
        at::Tensor loss = at::zeros({});
        for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * weights[i]).sum();
        (loss * (rank + 1)).backward();
        // Before the last microbatch nothing is communicated: gradients are still local.
        if (microbatch == 0) RANK_EXPECT(at::allclose(params[0].grad(), (rank + 1) * weights[0]));
      }
      RANK_EXPECT(ddp->Finish().ok());
      // Two microbatches of (r + 1) x weight, averaged over ranks 1 and 2: 3 x weight.
      for (size_t i = 0; i < params.size(); ++i) {
        RANK_EXPECT(at::allclose(params[i].grad(), 3 * weights[i]));
      }
    }
    return 0;
  });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

}  // namespace
}  // namespace titan
