#ifndef TITAN_LIB_DISTRIBUTED_MESH_COMMUNICATORS_H_
#define TITAN_LIB_DISTRIBUTED_MESH_COMMUNICATORS_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/parallel_dims.h"

namespace titan {

// The groups a component may ask for: the whole job, each mesh dimension, data parallel
// (dp_replicate × dp_shard) and FSDP's (dp_shard × cp).
enum class MeshGroup { kWorld, kPp, kDpReplicate, kDpShard, kCp, kTp, kDp, kDpShardCp };
inline constexpr int kNumMeshGroups = 8;

// Makes the communicator of one group from its name and job ranks (e.g. CreateGlooCommunicator
// bound to a rendezvous and timeout).
using CommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    const std::string& name, std::vector<int> global_ranks)>;

// This rank's communicator for every MeshGroup, created in one fixed order on every rank (so group
// creation, which blocks until all members join, cannot deadlock).
class MeshCommunicators {
 public:
  static absl::StatusOr<MeshCommunicators> Create(const ParallelDims& dims, int rank,
                                                  const CommunicatorFactory& factory);

  Communicator& Get(MeshGroup group) const { return *communicators_[static_cast<int>(group)]; }

 private:
  std::array<std::shared_ptr<Communicator>, kNumMeshGroups> communicators_;
};

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_MESH_COMMUNICATORS_H_
