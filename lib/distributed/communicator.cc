#include "lib/distributed/communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "lib/util/status_macros.h"

namespace titan {

absl::Status Await(absl::StatusOr<std::unique_ptr<Work>> work) {
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

absl::StatusOr<std::vector<std::string>> AllGatherStrings(Communicator& comm,
                                                          const std::string& value) {
  const int64_t size = comm.size();
  at::Tensor lengths = at::empty({size}, at::kLong);
  TITAN_RETURN_IF_ERROR(
      Await(comm.AllGather(at::full({1}, static_cast<int64_t>(value.size()), at::kLong), lengths)));
  const int64_t longest = std::max<int64_t>(1, lengths.max().item<int64_t>());
  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::memcpy(mine.data_ptr(), value.data(), value.size());
  at::Tensor all = at::empty({size * longest}, at::kByte);
  TITAN_RETURN_IF_ERROR(Await(comm.AllGather(mine, all)));
  std::vector<std::string> values;
  const auto* bytes = static_cast<const char*>(all.data_ptr());
  for (int64_t r = 0; r < size; ++r) {
    values.emplace_back(bytes + r * longest, lengths[r].item<int64_t>());
  }
  return values;
}

}  // namespace titan
