#ifndef TITAN_LIB_INTEROP_INSPECT_H_
#define TITAN_LIB_INTEROP_INSPECT_H_

// What a checkpoint holds (checkpoint_inspect): format, step, model, every tensor; optional value
// statistics, integrity checks, and a tensor-by-tensor comparison with another checkpoint.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/interop/checkpoint_reader.h"
#include "nlohmann/json.hpp"

namespace titan {

struct TensorStats {
  double min = 0;  // Over finite values; NaN when there are none (JSON: null).
  double max = 0;
  double mean = 0;
  double std = 0;  // Sample standard deviation (n - 1), as torch.std; NaN for one value.
  int64_t nan_count = 0;
  int64_t inf_count = 0;
};

struct InspectedTensor {
  TensorInfo info;
  std::optional<TensorStats> stats;
};

struct InspectOptions {
  bool stats = false;
  bool verify = false;
};

struct InspectReport {
  std::string directory;
  std::string format;
  std::optional<int64_t> step;
  // The family, or "" when the checkpoint holds no registered model (an HF folder with damaged
  // files: the one its config.json describes, as their tensors are unknown).
  std::string model;
  std::string flavor;        // "" for custom shapes.
  std::string architecture;  // DescribeArchitecture's line, when the model is known.
  std::string model_unknown_reason;  // Why not, when it is not (an unsupported config.json key).
  std::vector<InspectedTensor> tensors;
  int64_t total_elements = 0;
  uint64_t total_bytes = 0;
  bool verified = false;              // --verify ran.
  std::vector<std::string> problems;  // What --verify found (the damaged files among them).
  // Files found damaged on opening (truncated, missing), with or without --verify (titan's tensors
  // are listed from the manifest, without statistics), and --stats' tensors that fail their CRC.
  std::vector<std::string> damaged;
};

absl::StatusOr<InspectReport> InspectCheckpoint(const std::string& path,
                                                const InspectOptions& options);
nlohmann::json InspectReportToJson(const InspectReport& report);
// One header line, one line per tensor, totals (and verify results).
std::string FormatInspectReport(const InspectReport& report);

// Statistics in float64, a bounded chunk at a time (a 128k x 4k embedding never becomes float64
// whole).
TensorStats ComputeTensorStats(const at::Tensor& tensor);

struct TensorDifference {
  std::string name;
  std::string problem;  // Shape or dtype mismatch, or "" when only the values differ.
  // Over elements finite on both sides; absent when the shapes differ (no values compared).
  std::optional<double> max_abs_diff;
  // |a - b| / |b|, inf where b is 0 and a is not (as torch.testing.assert_close).
  std::optional<double> max_rel_diff;
  int64_t nonfinite_mismatches = 0;    // Elements where NaN or an infinity meets another value.
};

// A tensor whose values differ, but none by more than the tolerances.
struct ToleratedDifference {
  std::string name;
  double max_abs_diff = 0;
  double max_rel_diff = 0;
};

struct DiffReport {
  int64_t compared = 0;
  std::vector<std::string> only_in_first;
  std::vector<std::string> only_in_second;
  std::vector<TensorDifference> different;
  // Tensors whose values differ within the tolerances (none when rtol = atol = 0).
  std::vector<ToleratedDifference> tolerated;
  double rtol = 0;
  double atol = 0;
  // The architecture fields the two differ in (rope_theta, norm_eps, ...: the same tensors make
  // another model then); "" when alike or when either holds no registered model.
  std::string architecture;
  // Beside the differences: an HF lm_head.weight that is the tied embedding's bitwise copy (left
  // out of the comparison), or one that differs from it though config.json ties them.
  std::vector<std::string> notes;
  // Files of either side found damaged, on opening or by a tensor's CRC (its tensor not compared).
  std::vector<std::string> damaged;
  // Nothing differs beyond the tolerances, and everything was read (checkpoint_inspect exits 0).
  bool within_tolerance() const {
    return only_in_first.empty() && only_in_second.empty() && different.empty() &&
           architecture.empty() && damaged.empty();
  }
  // Nothing differs at all: the same tensors with equal values (NaN equals NaN).
  bool identical() const { return within_tolerance() && tolerated.empty(); }
};

// Compares two checkpoints tensor by tensor: elements differ when |a - b| > atol + rtol * |b|
// (NaN equals NaN); rtol = atol = 0 asks for equal values, and a negative tolerance is refused.
// Tensors of different dtypes differ whatever the tolerances (as torch.testing.assert_close's
// check_dtype); their values are compared and reported too.
// Checkpoints of different formats are compared in titan's names and q/k layout (each must hold a
// registered model). Two that each describe a registered model are compared by architecture too.
// An HF folder whose config.json ties the head holds lm_head.weight as the tie itself when it is
// the embedding's bitwise copy: it is not a tensor the other checkpoint lacks.
// A damaged file (truncated, missing, a tensor failing its CRC) is a finding, in `damaged`: its
// tensors are not compared, and an HF or Meta side with one is compared no further. An HF
// folder's damage is such a finding under `verify` (checkpoint_inspect --verify), else an error,
// as InspectCheckpoint reads it.
absl::StatusOr<DiffReport> DiffCheckpoints(const std::string& first, const std::string& second,
                                           double rtol, double atol, bool verify = false);
// An infinite difference or tolerance is the string "inf" there (strict JSON has no Infinity).
nlohmann::json DiffReportToJson(const DiffReport& report);
std::string FormatDiffReport(const DiffReport& report);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_INSPECT_H_
