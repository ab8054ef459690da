#include "lib/metrics/crc32c.h"

#include <array>

namespace titan {
namespace {

// Hand-written: Debian's abseil 20220623 has no CRC32C and zlib only has CRC-32 (another
// polynomial). Byte-at-a-time table is fast enough for a few scalar records per step.
constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

constexpr uint32_t kMaskDelta = 0xa282ead8u;

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : data) {
    crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xFFu] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

}  // namespace titan
