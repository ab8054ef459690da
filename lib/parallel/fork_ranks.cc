#include "lib/parallel/fork_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <exception>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "lib/distributed/gloo_communicator.h"
#include "lib/distributed/loopback_listener.h"
#include "lib/distributed/rendezvous.h"
#include "lib/util/status_macros.h"

namespace titan {

namespace {

// Forks `world` ranks that run `body` with their place in the job (rank 0's holding a listening
// socket for the store); their exit statuses.
std::vector<int> ForkRanks(
    int world,
    const std::function<absl::StatusOr<int>(int rank, const DistributedEnv& env)>& body) {
  int port = 0;
  const int listen_fd = ListenOnLoopback(&port);
  if (listen_fd < 0) {
    ADD_FAILURE() << "cannot open a listening socket";
    return {};
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      DistributedEnv env;
      env.rank = rank;
      env.world_size = world;
      env.master_port = port;
      if (rank == 0) {
        env.store_listen_fd = listen_fd;
      } else {
        close(listen_fd);
      }
      int code = 1;
      absl::StatusOr<int> result = code;
      // An exception must not unwind into the forked copy of gtest (it would run on).
      try {
        result = body(rank, env);
      } catch (const std::exception& e) {
        result = absl::InternalError(absl::StrCat("exception: ", e.what()));
      }
      if (result.ok()) {
        code = *result;
      } else {
        std::fprintf(stderr, "rank %d: %s\n", rank, result.status().ToString().c_str());
      }
      std::fflush(stderr);
      _exit(code);  // no atexit handlers or static destructors in a forked copy of gtest
    }
    pids.push_back(pid);
  }
  close(listen_fd);
  std::vector<int> statuses(world, -1);
  const absl::Time stop = absl::Now() + absl::Seconds(60);
  for (int done = 0; done < world && absl::Now() < stop;) {
    for (int rank = 0; rank < world; ++rank) {
      int status = 0;
      if (statuses[rank] == -1 && waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        statuses[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ++done;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (int rank = 0; rank < world; ++rank) {
    if (statuses[rank] == -1) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
    }
  }
  return statuses;
}

absl::StatusOr<std::shared_ptr<Rendezvous>> ConnectRendezvous(const DistributedEnv& env) {
  RendezvousOptions options;
  options.timeout = absl::Seconds(30);
  return Rendezvous::Connect(env, options);
}

}  // namespace

std::vector<int> RunRanks(int world, const RankBody& body) {
  return ForkRanks(world, [&](int rank, const DistributedEnv& env) -> absl::StatusOr<int> {
    TITAN_ASSIGN_OR_RETURN(std::shared_ptr<Rendezvous> rendezvous, ConnectRendezvous(env));
    std::vector<int> ranks(world);
    std::iota(ranks.begin(), ranks.end(), 0);
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                           CreateGlooCommunicator(rendezvous, "all", ranks, absl::Seconds(30)));
    return body(rank, *comm);
  });
}

std::vector<int> RunMeshRanks(const ParallelDims& dims, const MeshRankBody& body,
                              const CommunicatorWrapper& wrap) {
  return ForkRanks(
      dims.world_size(), [&](int rank, const DistributedEnv& env) -> absl::StatusOr<int> {
        TITAN_ASSIGN_OR_RETURN(std::shared_ptr<Rendezvous> rendezvous, ConnectRendezvous(env));
        TITAN_ASSIGN_OR_RETURN(
            MeshCommunicators comms,
            MeshCommunicators::Create(
                dims, rank,
                [&](const std::string& name,
                    std::vector<int> ranks) -> absl::StatusOr<std::unique_ptr<Communicator>> {
                  TITAN_ASSIGN_OR_RETURN(
                      std::unique_ptr<Communicator> comm,
                      CreateGlooCommunicator(rendezvous, name, ranks, absl::Seconds(30)));
                  return wrap ? wrap(name, std::move(comm)) : std::move(comm);
                }));
        return body(rank, comms);
      });
}

std::vector<int> RunRuntimeRanks(const JobConfig& config, int world, const RuntimeRankBody& body) {
  return ForkRanks(world, [&](int rank, const DistributedEnv& env) -> absl::StatusOr<int> {
    TITAN_ASSIGN_OR_RETURN(const DistributedRuntime runtime,
                           DistributedRuntime::Connect(config, env));
    return body(rank, runtime);
  });
}

}  // namespace titan
