#include "lib/checkpoint/pinned_host_arena.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

// Views of one block, one per tensor, that do not overlap: filling each leaves the others intact.
TEST(PinnedHostArenaTest, LaysOutEveryTensorInOneBlock) {
  PinnedHostArena arena;
  const NamedTensors tensors = {{"w", at::zeros({3, 5})},
                                {"step", at::scalar_tensor(4, at::kLong)},
                                {"empty", at::zeros({0, 2})},
                                {"half", at::zeros({7}, at::kBFloat16)}};
  absl::StatusOr<NamedTensors> views = arena.Views(tensors);
  ASSERT_TRUE(views.ok()) << views.status();
  ASSERT_EQ(views->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*views)[i].first, tensors[i].first);
    EXPECT_EQ((*views)[i].second.sizes(), tensors[i].second.sizes());
    EXPECT_EQ((*views)[i].second.scalar_type(), tensors[i].second.scalar_type());
    EXPECT_TRUE((*views)[i].second.is_contiguous());
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*views)[i].second.data_ptr()) % 64, 0u);
    (*views)[i].second.fill_(static_cast<double>(i + 1));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_TRUE((*views)[i].second.eq(static_cast<double>(i + 1)).all().item<bool>()) << i;
  }
  EXPECT_FALSE(arena.pinned());  // CPU tensors only
}

// The same names, shapes and dtypes reuse the block; any change lays it out anew. (The first
// views stay alive, so a new block cannot land at the old address.)
TEST(PinnedHostArenaTest, ReusesTheBlockWhileTheLayoutHolds) {
  PinnedHostArena arena;
  const absl::StatusOr<NamedTensors> first =
      arena.Views({{"a", at::ones({4})}, {"b", at::ones({2, 2})}});
  ASSERT_TRUE(first.ok());
  const void* block = first->front().second.data_ptr();
  absl::StatusOr<NamedTensors> again =
      arena.Views({{"a", at::zeros({4})}, {"b", at::zeros({2, 2})}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->front().second.data_ptr(), block);
  const NamedTensors reshaped = {{"a", at::ones({4})}, {"b", at::ones({4, 2})}};
  absl::StatusOr<NamedTensors> views = arena.Views(reshaped);
  ASSERT_TRUE(views.ok());
  EXPECT_NE(views->front().second.data_ptr(), block);
  EXPECT_EQ((*views)[1].second.sizes(), reshaped[1].second.sizes());
  const NamedTensors renamed = {{"a", at::ones({4})}, {"c", at::ones({4, 2})}};
  EXPECT_EQ(arena.Views(renamed)->back().first, "c");
}

}  // namespace
}  // namespace titan
