#ifndef TITAN_LIB_DISTRIBUTED_PARALLEL_DIMS_H_
#define TITAN_LIB_DISTRIBUTED_PARALLEL_DIMS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace titan {

// The mesh dimensions, outermost first (torchtitan's order: tp innermost, so a tp group is a run of
// consecutive ranks, on one host when tp <= GPUs per host).
enum class MeshDim { kPp, kDpReplicate, kDpShard, kCp, kTp };

// "pp", "dp_replicate", "dp_shard", "cp" or "tp".
const char* MeshDimName(MeshDim dim);

// Where one rank sits in the mesh.
struct MeshCoordinates {
  int pp = 0;
  int dp_replicate = 0;
  int dp_shard = 0;
  int cp = 0;
  int tp = 0;
};

// The device mesh: world = pp × dp_replicate × dp_shard × cp × tp. Components ask it for the ranks
// of their groups instead of computing ranks by hand.
class ParallelDims {
 public:
  // Degrees as configured; dp_shard = -1 takes whatever world size the others leave. Errors name the
  // [parallelism] keys, their product and the world size.
  static absl::StatusOr<ParallelDims> Build(int dp_replicate, int dp_shard, int cp, int tp, int pp,
                                            int world_size);

  int dp_replicate() const { return dp_replicate_; }
  int dp_shard() const { return dp_shard_; }
  int cp() const { return cp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int world_size() const { return world_size_; }
  int Degree(MeshDim dim) const;

  // Data parallel degree (replicas × shards) and which data parallel styles are on.
  int dp() const { return dp_replicate_ * dp_shard_; }
  bool dp_replicate_enabled() const { return dp_replicate_ > 1; }
  bool dp_shard_enabled() const { return dp_shard_ > 1; }
  bool cp_enabled() const { return cp_ > 1; }
  bool tp_enabled() const { return tp_ > 1; }
  bool pp_enabled() const { return pp_ > 1; }
  // FSDP shards parameters over dp_shard × cp (context parallel ranks hold the same weights).
  bool fsdp_enabled() const { return dp_shard_ * cp_ > 1; }

  MeshCoordinates CoordinatesOf(int rank) const;
  int RankOf(const MeshCoordinates& coordinates) const;

  // The ranks that share every coordinate of `rank` except those in `dims`, ascending; `rank`'s
  // index in the result is its rank within the group. E.g. {kTp} is its tensor parallel group,
  // {kDpReplicate, kDpShard} its data parallel group, {kDpShard, kCp} its FSDP group.
  std::vector<int> GroupRanks(int rank, absl::Span<const MeshDim> dims) const;

  // A name that every member of that group computes alike and no other group shares, e.g.
  // "dp_shard+cp/4" (the dims, then the group's lowest rank): the key prefix of its rendezvous.
  std::string GroupName(int rank, absl::Span<const MeshDim> dims) const;

 private:
  ParallelDims(int dp_replicate, int dp_shard, int cp, int tp, int pp, int world_size)
      : dp_replicate_(dp_replicate),
        dp_shard_(dp_shard),
        cp_(cp),
        tp_(tp),
        pp_(pp),
        world_size_(world_size) {}

  int dp_replicate_;
  int dp_shard_;
  int cp_;
  int tp_;
  int pp_;
  int world_size_;
};

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_PARALLEL_DIMS_H_
