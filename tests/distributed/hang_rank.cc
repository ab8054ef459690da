// A titan_train stand-in for the flight-recorder test: one rank of a data-parallel job, set up as
// the trainer sets it up (job config, DistributedRuntime: c10d Gloo groups and the comm trace),
// that runs HANG_OPS rounds of collectives (world all_reduce, with HANG_P2P=1 then a batch
// exchanging two tensors with the next and previous world member, sends first on every member as
// ring attention's; dp_shard all_gather, world broadcast), switches to
// [comm] train_timeout_seconds, and all-reduces over the world once more;
// rank HANG_RANK first sleeps HANG_SECONDS (or with HANG_STOP stops itself; with
// HANG_CONT_SECONDS too it is stopped 1 s into that all-reduce instead, by a child it forks, and
// continued HANG_CONT_SECONDS later, while the other ranks arrive 2 s late; with HANG_CONT_BEFORE
// too it stops itself before that all-reduce, the others arriving at once, and the child
// continues it HANG_CONT_SECONDS later). The run's id for the
// comm trace is HANG_RUN_ID
// ("hang" if unset). With --nproc_per_node it launches itself, as titan_train does, but with a 5 s
// grace period: the sleeping or stopped rank never takes SIGTERM, and the tests time the other
// ranks' timeouts, not the launcher's default 30 s before its SIGKILL.
#include <ATen/ATen.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"

namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  int parsed = fallback;
  if (value != nullptr && !absl::SimpleAtoi(value, &parsed)) parsed = fallback;
  return parsed;
}

// Sends `tensor` and a 3-element one to the next world member and receives both from the
// previous one, as one batch.
absl::Status ExchangeWithNeighbours(titan::Communicator& world, const at::Tensor& tensor) {
  const int next = (world.rank() + 1) % world.size();
  const int previous = (world.rank() + world.size() - 1) % world.size();
  const at::Tensor meta = at::full({3}, static_cast<float>(world.rank()));
  std::vector<titan::P2POp> ops = {{true, tensor, next, 0},
                                   {true, meta, next, 1},
                                   {false, at::empty_like(tensor), previous, 0},
                                   {false, at::empty_like(meta), previous, 1}};
  return titan::Await(world.BatchP2P(std::move(ops)));
}

absl::Status Run(int argc, char** argv) {
  absl::StatusOr<titan::DistributedEnv> env = titan::DetectDistributedEnv();
  if (!env.ok()) return env.status();
  // As titan_train's ranks finish their failure report when the launcher stops them (a rank that
  // failed first exited), the waiting ranks do; the hanging one is stopped.
  if (env->rank != EnvInt("HANG_RANK", -1)) signal(SIGTERM, SIG_IGN);
  absl::StatusOr<titan::JobConfig> config = titan::LoadJobConfig(argc, argv);
  if (!config.ok()) return config.status();
  if (absl::Status valid = titan::ValidateJobConfig(*config, env->world_size); !valid.ok()) {
    return valid;
  }
  absl::StatusOr<titan::DistributedRuntime> runtime =
      titan::DistributedRuntime::Connect(*config, *env);
  if (!runtime.ok()) return runtime.status();
  const char* run_id = std::getenv("HANG_RUN_ID");
  if (absl::Status s = runtime->StartCommTrace(run_id != nullptr ? run_id : "hang"); !s.ok()) {
    return s;
  }
  titan::Communicator& world = runtime->comm(titan::MeshGroup::kWorld);
  titan::Communicator& shard = runtime->comm(titan::MeshGroup::kDpShard);
  for (int round = 0; round < EnvInt("HANG_OPS", 3); ++round) {
    at::Tensor tensor = at::full({round + 1, 4}, static_cast<float>(env->rank));
    if (absl::Status s = titan::Await(world.AllReduce(tensor, titan::ReduceOp::kSum)); !s.ok()) {
      return s;
    }
    if (EnvInt("HANG_P2P", 0) != 0) {
      if (absl::Status s = ExchangeWithNeighbours(world, tensor); !s.ok()) return s;
    }
    at::Tensor gathered = at::empty({shard.size() * (round + 1), 4});
    if (absl::Status s = titan::Await(shard.AllGather(tensor, gathered)); !s.ok()) return s;
    if (absl::Status s = titan::Await(world.Broadcast(tensor, 0)); !s.ok()) return s;
  }
  runtime->SetTimeout(absl::Seconds(config->comm().train_timeout_seconds()));
  const int cont_seconds = EnvInt("HANG_STOP", 0) != 0 ? EnvInt("HANG_CONT_SECONDS", 0) : 0;
  const bool stop_before = cont_seconds > 0 && EnvInt("HANG_CONT_BEFORE", 0) != 0;
  if (cont_seconds > 0 && !stop_before && env->rank != EnvInt("HANG_RANK", -1)) {
    absl::SleepFor(absl::Seconds(2));
  }
  if (cont_seconds > 0 && env->rank == EnvInt("HANG_RANK", -1)) {
    const pid_t child = fork();
    if (child == 0) {
      // Async-signal-safe calls only: the parent has threads.
      if (!stop_before) {
        sleep(1);
        kill(getppid(), SIGSTOP);
      }
      sleep(cont_seconds);
      kill(getppid(), SIGCONT);
      _exit(0);
    }
    if (stop_before && child > 0) raise(SIGSTOP);
  }
  if (cont_seconds == 0 && env->rank == EnvInt("HANG_RANK", -1)) {
    // HANG_STOP: every thread stops, as a frozen host's would (rank 0's store server too).
    if (EnvInt("HANG_STOP", 0) != 0) raise(SIGSTOP);
    absl::SleepFor(absl::Seconds(EnvInt("HANG_SECONDS", 0)));
  }
  at::Tensor last = at::ones({16});
  if (absl::Status s = titan::Await(world.AllReduce(last, titan::ReduceOp::kSum)); !s.ok()) {
    return s;
  }
  return runtime->Barrier();
}

}  // namespace

int main(int argc, char** argv) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    int nproc = 0;
    if (absl::ConsumePrefix(&arg, "--nproc_per_node=") && absl::SimpleAtoi(arg, &nproc)) {
      titan::LaunchOptions options;
      options.grace_period = absl::Seconds(5);
      absl::StatusOr<int> status = titan::LaunchLocalRanks(nproc, argc, argv, options);
      if (!status.ok()) {
        std::cerr << "hang_rank: " << status.status().message() << "\n";
        return 1;
      }
      return *status;
    }
  }
  if (absl::Status status = Run(argc, argv); !status.ok()) {
    std::cerr << "hang_rank: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
