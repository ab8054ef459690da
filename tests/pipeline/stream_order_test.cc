// Pipeline parallelism under NCCL's ordering, emulated on CPU: every operation of the pipeline
// group runs on one worker thread, one at a time and each to its end before the next starts, as
// NCCL kernels run on one stream; a batch is issued whole, then waited for, as one NCCL group. A
// send on Gloo does not complete before its receive is posted, so separate sends and receives in
// the wrong order wait on each other here as they would on GPUs. Every schedule's training step
// must then still run, and produce the losses and gradients of the same step on plain Gloo, and
// the rank's thread must read no tensor value on the host (lib/profiling/host_read_counter.h).
#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/pipeline/pipeline_parallel.h"
#include "lib/profiling/host_read_counter.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"
#include "tests/pipeline/debug_pipeline.h"

namespace titan {
namespace {

// What the emulated stream ran: done when `status` is set.
struct Done {
  std::mutex mutex;
  std::condition_variable changed;
  bool finished = false;
  absl::Status status;
};

class StreamWork : public Work {
 public:
  explicit StreamWork(std::shared_ptr<Done> done) : done_(std::move(done)) {}
  absl::Status Wait() override {
    std::unique_lock<std::mutex> lock(done_->mutex);
    done_->changed.wait(lock, [&] { return done_->finished; });
    return done_->status;
  }
  bool IsCompleted() override {
    std::lock_guard<std::mutex> lock(done_->mutex);
    return done_->finished;
  }

 private:
  std::shared_ptr<Done> done_;
};

// Runs `inner`'s operations in issue order on one thread, each to its end before the next.
class OneStreamCommunicator : public ForwardingCommunicator {
 public:
  explicit OneStreamCommunicator(std::unique_ptr<Communicator> inner)
      : ForwardingCommunicator(std::move(inner)), worker_([this] { Serve(); }) {}
  ~OneStreamCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    worker_.join();
  }

  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    return Enqueue([=] { return inner()->AllReduce(tensor, op); });
  }
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    return Enqueue([=] { return inner()->AllGather(input, output); });
  }
  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    return Enqueue([=] { return inner()->ReduceScatter(input, output, op); });
  }
  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    return Enqueue([=] { return inner()->Broadcast(tensor, root); });
  }
  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) override {
    return Enqueue([=] { return inner()->Send(tensor, dst, tag); });
  }
  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) override {
    return Enqueue([=] { return inner()->Recv(tensor, src, tag); });
  }
  absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) override {
    return Enqueue([=] { return inner()->BatchP2P(ops); });
  }
  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    return Enqueue([=] { return inner()->AllToAll(input, output); });
  }
  absl::StatusOr<std::unique_ptr<Work>> Barrier() override {
    return Enqueue([=] { return inner()->Barrier(); });
  }

 private:
  using Start = std::function<absl::StatusOr<std::unique_ptr<Work>>()>;

  absl::StatusOr<std::unique_ptr<Work>> Enqueue(Start start) {
    auto done = std::make_shared<Done>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back(std::move(start), done);
    }
    queued_.notify_one();
    return std::unique_ptr<Work>(new StreamWork(done));
  }

  void Serve() {
    for (;;) {
      std::pair<Start, std::shared_ptr<Done>> next;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      const absl::Status status = Await(next.first());
      std::lock_guard<std::mutex> lock(next.second->mutex);
      next.second->finished = true;
      next.second->status = status;
      next.second->changed.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::pair<Start, std::shared_ptr<Done>>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

std::string OutPath(const std::string& run, int rank) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", run, ".rank", rank, ".txt");
}

// One training step of `model`'s debug model on `pp` ranks under `schedule` (one stage per rank,
// two for multi-stage schedules), each rank writing its loss and the sums of its gradients (a tied
// head's added to the embedding's, over the pipeline group, in FinishBackward).
void RunStep(const std::string& run, const std::string& model, const std::string& schedule, int pp,
             bool one_stream) {
  const ParallelDims dims = *ParallelDims::Build(1, 1, 1, 1, pp, pp);
  CommunicatorWrapper wrap;
  if (one_stream) {
    wrap = [](const std::string& name, std::unique_ptr<Communicator> comm) {
      return absl::StartsWith(name, "pp/")
                 ? std::unique_ptr<Communicator>(new OneStreamCommunicator(std::move(comm)))
                 : std::move(comm);
    };
  }
  const std::vector<int> statuses = RunMeshRanks(
      dims,
      [&](int rank, const MeshCommunicators& comms) -> int {
        PipelineOptions options;
        options.split.schedule = schedule;
        options.split.pp = pp;
        options.microbatches = 2 * pp;
        absl::StatusOr<DebugPipeline> debug = MakeDebugPipeline(model, options, dims, comms, rank);
        RANK_EXPECT(debug.ok());
        at::manual_seed(11);
        Batch batch;
        batch.tokens = at::randint(512, {options.microbatches, 32}, at::kLong);
        batch.labels = at::randint(512, {options.microbatches, 32}, at::kLong);
        HeadLoss loss{CrossEntropySum(), nullptr};
        absl::StatusOr<at::Tensor> sum;
        absl::Status finished;
        int host_reads = 0;
        {
          const HostReadCounter counter;
          sum = debug->pipeline->TrainStep(batch, loss, 1000.0, std::nullopt);
          if (sum.ok()) finished = debug->pipeline->FinishBackward();
          host_reads = counter.reads();
        }
        if (!sum.ok()) std::fprintf(stderr, "%s\n", sum.status().ToString().c_str());
        RANK_EXPECT(sum.ok());
        RANK_EXPECT(finished.ok());
        RANK_EXPECT(host_reads == 0);  // the schedule never waits for a GPU's values
        std::ofstream out(OutPath(run, rank));
        out.precision(17);
        out << sum->item<double>();
        for (const ParamRef& param : debug->pipeline->params()) {
          RANK_EXPECT(param.tensor->grad().defined());
          out << " " << param.tensor->grad().sum().item<double>();
        }
        return out.good() ? 0 : 1;
      },
      wrap);
  for (int rank = 0; rank < pp; ++rank) EXPECT_EQ(statuses[rank], 0) << run << " rank " << rank;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class StreamOrderTest : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {
};

TEST_P(StreamOrderTest, StepEqualsTheGlooStep) {
  const auto& [model, schedule, pp] = GetParam();
  const std::string name = absl::StrCat(model, "_", schedule, pp);
  RunStep(name + "_gloo", model, schedule, pp, /*one_stream=*/false);
  RunStep(name + "_stream", model, schedule, pp, /*one_stream=*/true);
  for (int rank = 0; rank < pp; ++rank) {
    const std::string gloo = Read(OutPath(name + "_gloo", rank));
    EXPECT_FALSE(gloo.empty()) << name << " rank " << rank;
    EXPECT_EQ(Read(OutPath(name + "_stream", rank)), gloo) << name << " rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, StreamOrderTest,
                         ::testing::Values(std::make_tuple("llama3", "1F1B", 2),
                                           std::make_tuple("llama3", "GPipe", 2),
                                           std::make_tuple("llama3", "Interleaved1F1B", 2),
                                           std::make_tuple("llama3", "InterleavedZeroBubble", 2),
                                           std::make_tuple("llama3", "ZBVZeroBubble", 2),
                                           std::make_tuple("llama3", "DualPipeV", 2),
                                           std::make_tuple("llama3", "1F1B", 3),
                                           std::make_tuple("llama3", "Interleaved1F1B", 3),
                                           std::make_tuple("qwen3", "1F1B", 2),
                                           std::make_tuple("qwen3", "ZBVZeroBubble", 2)));

}  // namespace
}  // namespace titan
