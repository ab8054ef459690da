#ifndef TITAN_LIB_PROFILING_PROFILE_REPORT_H_
#define TITAN_LIB_PROFILING_PROFILE_REPORT_H_

// What profile_run found on each rank, and the files it writes from that: summary.json for scripts
// and one self-contained report.html with inline SVG plots.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/profiling/memory_tracker.h"
#include "lib/profiling/trace_analysis.h"
#include "nlohmann/json.hpp"

namespace titan {

// The rows of the op table kept per rank in the summary and the report: the ops making up the
// step time, and those that ran beside it.
inline constexpr size_t kTopOps = 20;
inline constexpr size_t kTopOtherOps = 5;

struct RankProfile {
  int rank = 0;
  std::string trace_file;  // relative to the output folder
  std::vector<StepTime> steps;
  std::vector<OpStats> top_ops;    // the kTopOps InStepTime with the most self time
  double top_ops_self_ms = 0;      // their self time together
  std::vector<OpStats> other_ops;  // the kTopOtherOps not InStepTime with the most self time
  bool device_timeline = false;    // the split and top ops came from GPU kernels
  MemoryTimeline memory;
};

// What ran, for the report's header.
struct ProfileRunInfo {
  std::string model;   // e.g. "llama3 debugmodel"
  std::string device;  // e.g. "cpu", "NVIDIA H200"
  int world_size = 1;
  std::string parallelism;  // e.g. "data parallel: replicate 1 x shard 2; tp 1, cp 1, pp 1"
  int warmup = 0;
  int active = 0;
  int64_t local_batch_size = 0;
  int64_t seq_len = 0;
  // Gradient accumulation: each step runs `microbatches` of local_batch_size on every rank.
  int64_t microbatches = 1;
  int64_t dp_size = 1;  // ranks that read different data
};

// Sequences per optimizer step over all ranks: microbatches x local_batch_size x dp_size.
int64_t GlobalBatch(const ProfileRunInfo& info);

// The top ops of `analysis` and its steps, with no memory yet.
RankProfile MakeRankProfile(int rank, const std::string& trace_file, const TraceAnalysis& analysis);

// On a GPU run, which ranks' traces hold no GPU kernels (Kineto had no CUPTI) and what that means;
// empty when every rank's has them, or on CPU.
std::string MissingDeviceTimelineWarning(const ProfileRunInfo& info,
                                         const std::vector<RankProfile>& ranks);

// One line: mean step time and its split, peak memory, the top ops' share of step time.
std::string SummaryLine(const RankProfile& profile);

// Lossless for what the report needs (the memory samples included), to move a rank's profile to
// rank 0; `RankProfileFromJson` reads it back.
nlohmann::json RankProfileToJson(const RankProfile& profile);
absl::StatusOr<RankProfile> RankProfileFromJson(const nlohmann::json& json);

// The op table of one rank as JSON rows (every op, not only the top ones).
nlohmann::json OpTableJson(const TraceAnalysis& analysis);

// summary.json: per rank the mean step time and its split, each step, the peak memory by
// category, each category's own maximum, and the top ops; without the memory samples.
nlohmann::json SummaryJson(const ProfileRunInfo& info, const std::vector<RankProfile>& ranks);

// report.html: a step-time breakdown per rank, memory timelines with the peak by category, the
// top ops of rank 0 and each rank's tables. Nothing outside the file is fetched.
std::string ReportHtml(const ProfileRunInfo& info, const std::vector<RankProfile>& ranks);

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_PROFILE_REPORT_H_
