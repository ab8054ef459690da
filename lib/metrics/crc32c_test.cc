#include "lib/metrics/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

std::string Bytes(int count, int first, int stride) {
  std::string bytes;
  for (int i = 0; i < count; ++i) bytes.push_back(static_cast<char>(first + stride * i));
  return bytes;
}

// Check values from RFC 3720 appendix B.4 and the common "123456789" check string.
TEST(Crc32cTest, MatchesPublishedVectors) {
  EXPECT_EQ(Crc32c(""), 0x00000000u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(Bytes(32, 0, 1)), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(Bytes(32, 31, -1)), 0x113FDB5Cu);
}

// Expected values computed with tensorboard 2.21's masked_crc32c
// (tensorboard.compat.tensorflow_stub.pywrap_tensorflow).
TEST(Crc32cTest, MaskedMatchesTensorBoard) {
  EXPECT_EQ(MaskedCrc32c(""), 0xA282EAD8u);
  EXPECT_EQ(MaskedCrc32c("123456789"), 0xC78AB0E5u);
  EXPECT_EQ(MaskedCrc32c(std::string(32, '\0')), 0x0FD7FFFAu);
  EXPECT_EQ(MaskedCrc32c(Bytes(32, 0, 1)), 0x951F7892u);
}

}  // namespace
}  // namespace titan
