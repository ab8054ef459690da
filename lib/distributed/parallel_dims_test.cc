#include "lib/distributed/parallel_dims.h"

#include <array>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParallelDimsTest, InfersShardDegree) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(2, -1, 1, 2, 1, 16);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->dp_shard(), 4);
  EXPECT_EQ(dims->dp(), 8);
  EXPECT_TRUE(dims->dp_replicate_enabled());
  EXPECT_TRUE(dims->fsdp_enabled());
  EXPECT_TRUE(dims->tp_enabled());
  EXPECT_FALSE(dims->pp_enabled());
  EXPECT_FALSE(dims->cp_enabled());
}

TEST(ParallelDimsTest, SingleProcess) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(1, -1, 1, 1, 1, 1);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(dims->dp_shard(), 1);
  EXPECT_FALSE(dims->fsdp_enabled());
  EXPECT_THAT(dims->GroupRanks(0, {MeshDim::kDpShard, MeshDim::kCp}), ElementsAre(0));
}

TEST(ParallelDimsTest, ContextParallelAloneStillShardsWithFsdp) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(1, 1, 2, 1, 1, 2);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_TRUE(dims->fsdp_enabled());
}

TEST(ParallelDimsTest, ProductMismatchNamesEveryDegreeAndWorldSize) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(1, 3, 2, 1, 1, 4);
  ASSERT_FALSE(dims.ok());
  EXPECT_EQ(dims.status().message(),
            "[parallelism] data_parallel_replicate_degree=1 × data_parallel_shard_degree=3 × "
            "context_parallel_degree=2 × tensor_parallel_degree=1 × pipeline_parallel_degree=1 = "
            "6 does not match world size 4");
}

TEST(ParallelDimsTest, UninferableShardDegree) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(1, -1, 1, 3, 1, 8);
  ASSERT_FALSE(dims.ok());
  EXPECT_THAT(dims.status().message(),
              HasSubstr("data_parallel_shard_degree=-1 cannot be inferred: world size 8 is not "
                        "divisible by"));
  EXPECT_THAT(dims.status().message(), HasSubstr("tensor_parallel_degree=3"));
}

TEST(ParallelDimsTest, RejectsNonPositiveDegrees) {
  absl::StatusOr<ParallelDims> tp0 = ParallelDims::Build(1, -1, 1, 0, 1, 8);
  ASSERT_FALSE(tp0.ok());
  EXPECT_THAT(tp0.status().message(),
              HasSubstr("[parallelism] tensor_parallel_degree: expected a degree >= 1, got 0"));
  absl::StatusOr<ParallelDims> shard = ParallelDims::Build(1, -2, 1, 1, 1, 8);
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr("data_parallel_shard_degree"));
  EXPECT_FALSE(ParallelDims::Build(1, 1, 1, 1, 1, 0).ok());
}

// pp=2 × dp_shard=2 × tp=2: rank = (pp * 2 + dp_shard) * 2 + tp, worked out by hand.
TEST(ParallelDimsTest, HandWorkedGroups) {
  absl::StatusOr<ParallelDims> dims = ParallelDims::Build(1, 2, 1, 2, 2, 8);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kTp}), ElementsAre(4, 5));
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kDpShard}), ElementsAre(5, 7));
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kPp}), ElementsAre(1, 5));
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kDpReplicate, MeshDim::kDpShard}), ElementsAre(5, 7));
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kDpShard, MeshDim::kTp}), ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(dims->GroupRanks(5, {MeshDim::kCp}), ElementsAre(5));
  const MeshCoordinates c = dims->CoordinatesOf(5);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp_shard, 0);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(dims->GroupName(5, {MeshDim::kTp}), "tp/4");
  EXPECT_EQ(dims->GroupName(7, {MeshDim::kCp, MeshDim::kDpShard}), "dp_shard+cp/5");
}

// Every layout of a 24-rank world: coordinates enumerated by nested loops (tp innermost) are the
// reference; a group along dims D is every rank equal to `rank` outside D.
TEST(ParallelDimsTest, AllLayoutsMatchBruteForce) {
  const int kWorld = 24;
  const std::vector<std::vector<MeshDim>> kGroups = {
      {MeshDim::kPp},     {MeshDim::kDpReplicate},
      {MeshDim::kDpShard}, {MeshDim::kCp},
      {MeshDim::kTp},     {MeshDim::kDpReplicate, MeshDim::kDpShard},
      {MeshDim::kDpShard, MeshDim::kCp}};
  int layouts = 0;
  for (int pp : {1, 2, 3, 4}) {
    for (int rep : {1, 2, 3}) {
      for (int cp : {1, 2}) {
        for (int tp : {1, 2, 4}) {
          if (kWorld % (pp * rep * cp * tp) != 0) continue;
          absl::StatusOr<ParallelDims> dims = ParallelDims::Build(rep, -1, cp, tp, pp, kWorld);
          ASSERT_TRUE(dims.ok()) << dims.status();
          const int shard = dims->dp_shard();
          ASSERT_EQ(pp * rep * shard * cp * tp, kWorld);
          ++layouts;
          std::map<int, std::array<int, 5>> reference;  // rank -> (pp, rep, shard, cp, tp)
          int next_rank = 0;
          for (int a = 0; a < pp; ++a)
            for (int b = 0; b < rep; ++b)
              for (int s = 0; s < shard; ++s)
                for (int c = 0; c < cp; ++c)
                  for (int t = 0; t < tp; ++t) reference[next_rank++] = {a, b, s, c, t};
          for (const auto& [rank, ref] : reference) {
            const MeshCoordinates got = dims->CoordinatesOf(rank);
            EXPECT_EQ((std::array<int, 5>{got.pp, got.dp_replicate, got.dp_shard, got.cp, got.tp}),
                      ref);
            EXPECT_EQ(dims->RankOf(got), rank);
            for (const std::vector<MeshDim>& group : kGroups) {
              std::set<int> varying;
              for (MeshDim d : group) varying.insert(static_cast<int>(d));
              std::vector<int> expected;
              for (const auto& [other, other_ref] : reference) {
                bool same = true;
                for (int i = 0; i < 5; ++i) {
                  if (!varying.count(i) && other_ref[i] != ref[i]) same = false;
                }
                if (same) expected.push_back(other);
              }
              EXPECT_EQ(dims->GroupRanks(rank, group), expected);
              int size = 1;
              for (MeshDim d : group) size *= dims->Degree(d);
              EXPECT_EQ(static_cast<int>(expected.size()), size);
              EXPECT_EQ(dims->GroupName(rank, group), dims->GroupName(expected.back(), group));
            }
          }
        }
      }
    }
  }
  EXPECT_GT(layouts, 20);
}

}  // namespace
}  // namespace titan
