#ifndef TITAN_LIB_METRICS_CRC32C_H_
#define TITAN_LIB_METRICS_CRC32C_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace titan {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`.
uint32_t Crc32c(absl::string_view data);

// The masked CRC-32C that TFRecord framing stores: a CRC of data that itself holds CRCs stays
// well distributed.
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace titan

#endif  // TITAN_LIB_METRICS_CRC32C_H_
