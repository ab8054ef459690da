#ifndef TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_
#define TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_

// Checks of an untrusted torch.save archive that must pass before LibTorch's readers open it:
// they trust the sizes the file claims.

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// One pickle opcode where it sits in the pickle's bytes.
struct PickleOp {
  uint8_t code = 0;
  const char* name = "";
  size_t start = 0;             // The opcode's byte.
  size_t end = 0;               // Past its argument.
  absl::string_view argument;   // A fixed-size argument, or a counted one's bytes.
  absl::string_view lines[2];   // Newline-terminated arguments (GLOBAL's module and name).
  bool in_state_dicts = false;  // torch.save (protocol 2) writes it for a dict of tensors.

  // The fixed-size argument as the little-endian integer it is (BINPUT's memo index).
  uint64_t Integer() const;
};

// The opcode at `pos` (< pickle.size()) with its argument, which must lie within `pickle`; else
// InvalidArgument naming the byte.
absl::StatusOr<PickleOp> ReadPickleOp(absl::string_view pickle, size_t pos);

// A torch.save pickle that only builds a dict of tensors, within the lengths and memo it declares;
// else InvalidArgument saying what is wrong.
absl::Status CheckStateDictPickle(absl::string_view pickle);

// Every zip record claims at most the archive's size (torch.save stores records uncompressed).
absl::Status CheckZipRecordSizes(const caffe2::serialize::ReadAdapterInterface& archive);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_
