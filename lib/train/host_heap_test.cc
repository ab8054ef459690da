#include "lib/train/host_heap.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace titan {
namespace {

// This process's resident memory, from /proc/self/statm.
int64_t ResidentBytes() {
  long pages_total = 0;
  long pages_resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return -1;
  const int read = std::fscanf(statm, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(statm);
  return read == 2 ? pages_resident * ::sysconf(_SC_PAGESIZE) : -1;
}

// 256 MiB of small blocks, freed but for the last, which pins the heap's top: free() cannot shrink
// the heap past it, so the freed pages stay resident until something trims them.
std::unique_ptr<char[]> LeaveFreedPagesResident() {
  constexpr int kBlocks = 256 * 1024;
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.emplace_back(new char[1024]);
    std::memset(blocks.back().get(), 1, 1024);
  }
  std::unique_ptr<char[]> top = std::move(blocks.back());
  blocks.clear();
  return top;
}

TEST(ReturnFreedHostHeapAtStepTest, TrimsEveryGcFreqSteps) {
  EXPECT_TRUE(ReturnFreedHostHeapAtStep(50, 50));
  EXPECT_TRUE(ReturnFreedHostHeapAtStep(100, 50));
  EXPECT_FALSE(ReturnFreedHostHeapAtStep(49, 50));
  EXPECT_TRUE(ReturnFreedHostHeapAtStep(3, 1));
}

TEST(ReturnFreedHostHeapAtStepTest, ReturnsFreedPagesToTheSystem) {
  constexpr int64_t kMiB = 1 << 20;
  const std::unique_ptr<char[]> top = LeaveFreedPagesResident();
  const int64_t before = ResidentBytes();
  ASSERT_FALSE(ReturnFreedHostHeapAtStep(1, 2));
  EXPECT_GT(ResidentBytes(), before - 64 * kMiB) << "freed without a trim";
  ASSERT_TRUE(ReturnFreedHostHeapAtStep(2, 2));
  EXPECT_LT(ResidentBytes(), before - 128 * kMiB);
}

}  // namespace
}  // namespace titan
