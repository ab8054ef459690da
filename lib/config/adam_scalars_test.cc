#include "lib/config/adam_scalars.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(AdamScalarsTest, TheFirstStepSizeAndAdamWDecayMustFitFloat32) {
  EXPECT_EQ(AdamScalarsPastFloat32(1e38, 0.9, 0.1, true),
            "with beta1 0.9 the first step's size lr / (1 - beta1) = 1e+39 is past float32's range "
            "(3.4028234663852886e+38)");
  EXPECT_EQ(AdamScalarsPastFloat32(1e32, 0.9999999, 0, true).substr(0, 17), "with beta1 0.9999");
  EXPECT_EQ(AdamScalarsPastFloat32(1e37, 0.9, 100, true),
            "lr times weight_decay 100 = 1e+39 is past float32's range (3.4028234663852886e+38)");
  // Adam adds weight_decay x parameter to the gradient: no lr x weight_decay scalar.
  EXPECT_EQ(AdamScalarsPastFloat32(1e37, 0.9, 100, false), "");
  EXPECT_EQ(AdamScalarsPastFloat32(1, 0.99, 0, true), "");
  EXPECT_EQ(AdamScalarsPastFloat32(3e37, 0.9, 10, true), "");
}

}  // namespace
}  // namespace titan
