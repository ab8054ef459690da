// ParallelizeDecoder's FSDP wiring over forked ranks: in which order a forward starts the blocks'
// all-gathers and their compute.
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/parallel/parallelize.h"

namespace titan {
namespace {

// What a rank's forward ran, in order: "all_gather" when a collective starts, "linear" for each
// linear layer's op.
std::vector<std::string>& Log() {
  static std::vector<std::string> log;
  return log;
}

class GatherRecorder : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    Log().push_back("all_gather");
    return ForwardingCommunicator::AllGather(input, output);
  }
};

// A 3-block model whose every rank starts from the same weights.
TransformerArgs TinyArgs() {
  TransformerArgs args;
  args.dim = 16;
  args.n_layers = 3;
  args.n_heads = 2;
  args.vocab_size = 8;
  args.ffn_hidden_dim = 32;
  args.max_seq_len = 4;
  return args;
}

void Initialize(Decoder& model) {
  at::manual_seed(0);
  model.Materialize(at::TensorOptions().dtype(at::kFloat));
  model.InitWeights();
}

std::unique_ptr<at::ObserverContext> RecordLinear(const at::RecordFunction& fn) {
  if (std::string_view(fn.name()) == "aten::linear") Log().push_back("linear");
  return nullptr;
}

// Every block's forward, checkpointed or not, starts the next block's all-gather before its own
// compute, so that the gather overlaps it: the second block's gather comes before the first
// linear, and every block is gathered once (each prefetch used).
TEST(ParallelizeFsdpTest, EveryBlockPrefetchesTheNextInForward) {
  const ParallelDims dims = *ParallelDims::Build(1, 2, 1, 1, 1, 2);
  const std::vector<int> statuses = RunMeshRanks(
      dims,
      [&dims](int rank, const MeshCommunicators& comms) {
        for (const auto& [mode, option] : std::vector<std::pair<std::string, std::string>>{
                 {"none", ""}, {"full", ""}, {"selective", "op"}, {"selective", "2"}}) {
          const TransformerArgs args = TinyArgs();
          Decoder model(args, at::TensorOptions().dtype(at::kFloat));
          Initialize(model);
          ParallelizeOptions options;
          options.ac_mode = mode;
          options.selective_ac_option = option;
          absl::StatusOr<std::unique_ptr<DataParallel>> dp =
              ParallelizeDecoder(model, options, dims, &comms);
          RANK_EXPECT(dp.ok());
          const at::Tensor tokens = at::randint(0, args.vocab_size, {1, 4}, at::kLong);
          Log().clear();
          at::Tensor logits;
          {
            at::RecordFunctionGuard enabled(true);
            const at::CallbackHandle handle = at::addThreadLocalCallback(
                at::RecordFunctionCallback(&RecordLinear).scopes({at::RecordScope::FUNCTION}));
            logits = (*dp)->Forward([&] { return model.Forward(tokens); });
            at::removeCallback(handle);
          }
          const std::vector<std::string>& log = Log();
          std::vector<size_t> gathers;
          for (size_t i = 0; i < log.size(); ++i) {
            if (log[i] == "all_gather") gathers.push_back(i);
          }
          // The embedding/norm/output group, then each block once.
          RANK_EXPECT(gathers.size() == static_cast<size_t>(1 + args.n_layers));
          // Blocks 0 and 1 gathered back to back: block 0 computes after block 1's gather started.
          RANK_EXPECT(gathers[2] == gathers[1] + 1);
          RANK_EXPECT(logits.requires_grad());
        }
        return 0;
      },
      [](const std::string&, std::unique_ptr<Communicator> communicator) {
        return std::unique_ptr<Communicator>(new GatherRecorder(std::move(communicator)));
      });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

// Inside a GatheredScope, forwards without autograd gather nothing and compute what gathering
// forwards compute; the scope gathers each group once, and afterwards the slots hold shards again.
TEST(ParallelizeFsdpTest, GatheredScopeForwardsGatherNothing) {
  const ParallelDims dims = *ParallelDims::Build(1, 2, 1, 1, 1, 2);
  const std::vector<int> statuses = RunMeshRanks(
      dims,
      [&dims](int rank, const MeshCommunicators& comms) {
        const TransformerArgs args = TinyArgs();
        Decoder model(args, at::TensorOptions().dtype(at::kFloat));
        Initialize(model);
        absl::StatusOr<std::unique_ptr<DataParallel>> dp =
            ParallelizeDecoder(model, ParallelizeOptions(), dims, &comms);
        RANK_EXPECT(dp.ok());
        const std::vector<int64_t> shard_shape = model.OutputWeight().sizes().vec();
        c10::NoGradGuard no_grad;
        const at::Tensor tokens = at::randint(0, args.vocab_size, {1, 4}, at::kLong);
        const at::Tensor expected = (*dp)->Forward([&] { return model.Forward(tokens); });
        Log().clear();
        {
          absl::StatusOr<std::unique_ptr<DataParallel::GatheredScope>> scope =
              DataParallel::GatheredScope::Gather(**dp);
          RANK_EXPECT(scope.ok());
          RANK_EXPECT(Log().size() == static_cast<size_t>(1 + args.n_layers));
          Log().clear();
          for (int i = 0; i < 2; ++i) {
            const at::Tensor logits = (*dp)->Forward([&] { return model.Forward(tokens); });
            RANK_EXPECT(logits.equal(expected));
          }
          RANK_EXPECT(Log().empty());
        }
        RANK_EXPECT(model.OutputWeight().sizes().vec() == shard_shape);
        (*dp)->Forward([&] { return model.Forward(tokens); });
        RANK_EXPECT(Log().size() == static_cast<size_t>(1 + args.n_layers));
        return 0;
      },
      [](const std::string&, std::unique_ptr<Communicator> communicator) {
        return std::unique_ptr<Communicator>(new GatherRecorder(std::move(communicator)));
      });
  EXPECT_EQ(statuses, std::vector<int>(2, 0));
}

}  // namespace
}  // namespace titan
