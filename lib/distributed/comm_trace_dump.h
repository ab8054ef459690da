#ifndef TITAN_LIB_DISTRIBUTED_COMM_TRACE_DUMP_H_
#define TITAN_LIB_DISTRIBUTED_COMM_TRACE_DUMP_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace titan {

// What matching needs of one recorded collective.
struct CommTraceEntry {
  std::string op;
  std::string state;
  std::string input_sizes;
  std::string output_sizes;
  std::string input_dtypes;  // e.g. "[Float]"
  std::string output_dtypes;
  int64_t created_ns = 0;  // When its rank issued it (c10d's time_created_ns; 0: unrecorded).
  int64_t timeout_ms = 0;  // How long its rank waits for it (c10d's timeout_ms; 0: unrecorded).
};

// One rank's dump, as matching needs it.
struct CommTraceDump {
  std::string run_id;         // "" in dumps without one (c10d's own).
  std::optional<int> writer;  // The rank that wrote it ("rank", which titan writes; c10d's: none).
  std::optional<int64_t> dumped_ns;  // When ("dump_time_ns", titan's; c10d's: none).
  // group name -> collective sequence number -> entry.
  std::map<std::string, std::map<int64_t, CommTraceEntry>> collectives;
  std::map<std::string, std::vector<int>> group_ranks;
};

// Reads one rank's flight-recorder dump (a pickle, protocol 2, as CommTrace and c10d's
// ProcessGroupNCCL write it): its groups with their ranks and its collectives (point-to-point
// operations left out). Every field is type-checked, so a damaged or foreign file is refused
// naming the file and the field.
absl::StatusOr<CommTraceDump> ReadCommTraceDump(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_COMM_TRACE_DUMP_H_
