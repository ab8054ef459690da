#include "lib/distributed/mesh_communicators.h"

#include <utility>

#include "lib/util/status_macros.h"

namespace titan {

absl::StatusOr<MeshCommunicators> MeshCommunicators::Create(const ParallelDims& dims, int rank,
                                                            const CommunicatorFactory& factory) {
  const std::pair<MeshGroup, std::vector<MeshDim>> kGroups[] = {
      {MeshGroup::kWorld,
       {MeshDim::kPp, MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kCp, MeshDim::kTp}},
      {MeshGroup::kPp, {MeshDim::kPp}},
      {MeshGroup::kDpReplicate, {MeshDim::kDpReplicate}},
      {MeshGroup::kDpShard, {MeshDim::kDpShard}},
      {MeshGroup::kCp, {MeshDim::kCp}},
      {MeshGroup::kTp, {MeshDim::kTp}},
      {MeshGroup::kDp, {MeshDim::kDpReplicate, MeshDim::kDpShard}},
      {MeshGroup::kDpShardCp, {MeshDim::kDpShard, MeshDim::kCp}},
  };
  MeshCommunicators mesh;
  for (const auto& [group, mesh_dims] : kGroups) {
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator,
                           factory(dims.GroupName(rank, mesh_dims), dims.GroupRanks(rank, mesh_dims)));
    mesh.communicators_[static_cast<int>(group)] = std::move(communicator);
  }
  return mesh;
}

}  // namespace titan
