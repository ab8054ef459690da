#include "lib/distributed/parallel_dims.h"

#include <algorithm>
#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace titan {
namespace {

constexpr std::array<MeshDim, 5> kMeshOrder = {MeshDim::kPp, MeshDim::kDpReplicate,
                                               MeshDim::kDpShard, MeshDim::kCp, MeshDim::kTp};

int& CoordinateRef(MeshCoordinates& coordinates, MeshDim dim) {
  switch (dim) {
    case MeshDim::kPp:
      return coordinates.pp;
    case MeshDim::kDpReplicate:
      return coordinates.dp_replicate;
    case MeshDim::kDpShard:
      return coordinates.dp_shard;
    case MeshDim::kCp:
      return coordinates.cp;
    case MeshDim::kTp:
      return coordinates.tp;
  }
  LOG(FATAL) << "unknown mesh dimension";
}

std::string Term(const char* key, int degree) { return absl::StrCat(key, "=", degree); }

}  // namespace

const char* MeshDimName(MeshDim dim) {
  switch (dim) {
    case MeshDim::kPp:
      return "pp";
    case MeshDim::kDpReplicate:
      return "dp_replicate";
    case MeshDim::kDpShard:
      return "dp_shard";
    case MeshDim::kCp:
      return "cp";
    case MeshDim::kTp:
      return "tp";
  }
  return "unknown";
}

absl::StatusOr<ParallelDims> ParallelDims::Build(int dp_replicate, int dp_shard, int cp, int tp,
                                                 int pp, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[parallelism] world size must be positive, got ", world_size));
  }
  const std::pair<const char*, int> fixed[] = {{"data_parallel_replicate_degree", dp_replicate},
                                               {"context_parallel_degree", cp},
                                               {"tensor_parallel_degree", tp},
                                               {"pipeline_parallel_degree", pp}};
  int others = 1;
  std::vector<std::string> other_terms;
  for (const auto& [key, degree] : fixed) {
    if (degree < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("[parallelism] ", key, ": expected a degree >= 1, got ", degree));
    }
    others *= degree;
    other_terms.push_back(Term(key, degree));
  }
  if (dp_shard == -1) {
    if (world_size % others != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[parallelism] data_parallel_shard_degree=-1 cannot be inferred: world size ",
          world_size, " is not divisible by ", absl::StrJoin(other_terms, " × "), " = ", others));
    }
    dp_shard = world_size / others;
  } else if (dp_shard < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parallelism] data_parallel_shard_degree: expected -1 (infer) or a degree >= 1, got ",
        dp_shard));
  }
  if (others * dp_shard != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[parallelism] ", Term("data_parallel_replicate_degree", dp_replicate), " × ",
        Term("data_parallel_shard_degree", dp_shard), " × ", Term("context_parallel_degree", cp),
        " × ", Term("tensor_parallel_degree", tp), " × ", Term("pipeline_parallel_degree", pp),
        " = ", others * dp_shard, " does not match world size ", world_size));
  }
  return ParallelDims(dp_replicate, dp_shard, cp, tp, pp, world_size);
}

int ParallelDims::Degree(MeshDim dim) const {
  switch (dim) {
    case MeshDim::kPp:
      return pp_;
    case MeshDim::kDpReplicate:
      return dp_replicate_;
    case MeshDim::kDpShard:
      return dp_shard_;
    case MeshDim::kCp:
      return cp_;
    case MeshDim::kTp:
      return tp_;
  }
  return 1;
}

MeshCoordinates ParallelDims::CoordinatesOf(int rank) const {
  CHECK(rank >= 0 && rank < world_size_) << "rank " << rank << " outside world " << world_size_;
  MeshCoordinates coordinates;
  for (auto dim = kMeshOrder.rbegin(); dim != kMeshOrder.rend(); ++dim) {
    CoordinateRef(coordinates, *dim) = rank % Degree(*dim);
    rank /= Degree(*dim);
  }
  return coordinates;
}

int ParallelDims::RankOf(const MeshCoordinates& coordinates) const {
  MeshCoordinates copy = coordinates;
  int rank = 0;
  for (MeshDim dim : kMeshOrder) rank = rank * Degree(dim) + CoordinateRef(copy, dim);
  return rank;
}

std::vector<int> ParallelDims::GroupRanks(int rank, absl::Span<const MeshDim> dims) const {
  const MeshCoordinates base = CoordinatesOf(rank);
  std::vector<int> ranks = {RankOf(base)};
  // Each listed dimension multiplies the group by its degree.
  for (MeshDim dim : dims) {
    std::vector<int> grown;
    for (int member : ranks) {
      MeshCoordinates coordinates = CoordinatesOf(member);
      for (int i = 0; i < Degree(dim); ++i) {
        CoordinateRef(coordinates, dim) = i;
        grown.push_back(RankOf(coordinates));
      }
    }
    ranks = std::move(grown);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string ParallelDims::GroupName(int rank, absl::Span<const MeshDim> dims) const {
  std::vector<const char*> names;
  for (MeshDim dim : kMeshOrder) {
    if (std::find(dims.begin(), dims.end(), dim) != dims.end()) names.push_back(MeshDimName(dim));
  }
  return absl::StrCat(absl::StrJoin(names, "+"), "/", GroupRanks(rank, dims).front());
}

}  // namespace titan
