#ifndef TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_
#define TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_

// Checks of an untrusted torch.save archive that must pass before LibTorch's readers open it:
// they trust the sizes the file claims.

#include <caffe2/serialize/read_adapter_interface.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace titan {

// A torch.save pickle that only builds a dict of tensors, within the lengths and memo it declares;
// else InvalidArgument saying what is wrong.
absl::Status CheckStateDictPickle(absl::string_view pickle);

// Every zip record claims at most the archive's size (torch.save stores records uncompressed).
absl::Status CheckZipRecordSizes(const caffe2::serialize::ReadAdapterInterface& archive);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_TORCH_ARCHIVE_CHECKS_H_
