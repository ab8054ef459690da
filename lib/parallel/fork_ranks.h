#ifndef TITAN_LIB_PARALLEL_FORK_RANKS_H_
#define TITAN_LIB_PARALLEL_FORK_RANKS_H_

// Multi-rank unit tests: forks ranks (before the test touches LibTorch, so no thread pool is split
// by fork) joined in one Gloo group on loopback; each rank checks its own results and reports
// through its exit status and stderr.

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/config/job_config.pb.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/parallel/distributed_runtime.h"

namespace titan {

// In a rank's body: on failure, prints the condition and returns 1 (the rank's exit status).
#define RANK_EXPECT(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "rank %d: %s:%d: %s failed\n", rank, __FILE__, __LINE__, #cond); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

using RankBody = std::function<int(int rank, Communicator& comm)>;

// Forks `world` ranks joined in one Gloo group and returns their exit statuses (killed after 60 s).
std::vector<int> RunRanks(int world, const RankBody& body);

using MeshRankBody = std::function<int(int rank, const MeshCommunicators& comms)>;

// Wraps the communicator of the mesh group named `name` (the wrapper may return it unchanged).
using CommunicatorWrapper = std::function<std::unique_ptr<Communicator>(
    const std::string& name, std::unique_ptr<Communicator> communicator)>;

// The same for `dims`' world, with a Gloo communicator for every mesh group (each passed through
// `wrap` when set).
std::vector<int> RunMeshRanks(const ParallelDims& dims, const MeshRankBody& body,
                              const CommunicatorWrapper& wrap = nullptr);

using RuntimeRankBody = std::function<int(int rank, const DistributedRuntime& runtime)>;

// The same for `world` ranks each connected as a job of `config` (DistributedRuntime::Connect: the
// mesh of its [parallelism], Gloo communicators), as titan_train's ranks are.
std::vector<int> RunRuntimeRanks(const JobConfig& config, int world, const RuntimeRankBody& body);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_FORK_RANKS_H_
