#ifndef TITAN_LIB_DISTRIBUTED_DISTRIBUTED_ENV_H_
#define TITAN_LIB_DISTRIBUTED_DISTRIBUTED_ENV_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace titan {

// Where this process sits in the job, and where rank 0 hosts the rendezvous store.
struct DistributedEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // What set the values: "single", "torchrun" (titan's own launcher too), "slurm" or "openmpi".
  std::string source = "single";
  // Rank 0 under titan's launcher: the socket it bound to MASTER_PORT and listens on, for the
  // store to take over (kStoreListenFdVar), so no other process can take the port meanwhile; -1.
  int store_listen_fd = -1;
};

// The variable titan's launcher passes rank 0 its listening socket's descriptor in.
inline constexpr char kStoreListenFdVar[] = "TITAN_STORE_LISTEN_FD";

// Reads the job layout from the environment, first match wins: RANK/WORLD_SIZE (torchrun, titan),
// SLURM_PROCID/SLURM_NTASKS (srun), OMPI_COMM_WORLD_RANK/SIZE (mpirun); none means one process.
// MASTER_ADDR/MASTER_PORT override what a scheduler implies. Errors name the variable and value.
// A kStoreListenFdVar descriptor must be a socket listening on MASTER_PORT; it is then closed on
// exec, so that no child of rank 0 holds the port.
absl::StatusOr<DistributedEnv> DetectDistributedEnv();

// The same from an explicit variable map (tests; embedding).
absl::StatusOr<DistributedEnv> DetectDistributedEnvFrom(
    const absl::flat_hash_map<std::string, std::string>& env);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_DISTRIBUTED_ENV_H_
