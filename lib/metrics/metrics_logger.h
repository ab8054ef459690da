#ifndef TITAN_LIB_METRICS_METRICS_LOGGER_H_
#define TITAN_LIB_METRICS_METRICS_LOGGER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/metrics/tensorboard_writer.h"

namespace titan {

// What the trainer measured over one logged step.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;       // global average loss
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double tps = 0;         // tokens per second per device
  double tflops = 0;      // achieved model TFLOP/s per device
  double mfu = 0;         // model FLOPs utilization in percent; 0 when the peak is unknown
  double memory_gib = 0;  // peak device memory (peak RSS on CPU)
  std::optional<double> validation_loss;
  // Any other scalars; each name is the JSON key, the log-line label and the TensorBoard tag.
  std::vector<std::pair<std::string, double>> extra;
};

struct MetricsLoggerOptions {
  std::string dump_folder;         // metrics.jsonl is appended to here; created if missing
  std::string tensorboard_folder;  // where event files go; empty: no TensorBoard
  bool disable_color_printing = false;
  // The step a run resumed from (-1: none): metrics.jsonl's rows of later steps, which the run
  // it continues logged after its last checkpoint, are dropped, so each step has one row;
  // TensorBoard is told to hide the earlier event files' points of those steps.
  int64_t resumed_step = -1;
  // Non-empty: the run counts from step 0 again over an earlier run's steps ([checkpoint]
  // exclude_from_loading = ["train_state"]), which stay until it first saves. Until
  // CommitRestart its rows go to metrics.jsonl.restart-<id> and its TensorBoard points wait in
  // memory, so a run that dies before saving leaves the earlier run's history as it was.
  std::string restart_id;
};

// Rewrites the JSON-lines file `path` (atomically; a missing one stays missing) without the rows
// whose "step" is after `step` (step < 0: none), and without a last row cut short (a run that died
// mid-write, e.g. on a full disk), which would break every JSON-lines reader. Other rows it cannot
// read stay. A resumed run's per-step logs drop the steps it redoes this way.
absl::Status DropRowsAfter(const std::string& path, int64_t step);

// The log line for one step, e.g.
// "step: 12  loss:  5.1234  grad_norm:  1.2345  lr: 8.0e-04  memory:  0.52GiB  tps: 12,345
// tflops: 0.12  mfu: 0.05%", with ANSI colors when `color`.
std::string FormatStepLine(const StepMetrics& metrics, bool color);

// Reports each logged step three ways: a glog INFO line, one JSON object per line in
// <dump_folder>/metrics.jsonl, and optionally TensorBoard scalars under torchtitan's tags.
class MetricsLogger {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsLogger>> Create(const MetricsLoggerOptions& options);

  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  ~MetricsLogger();

  // Logs, appends and flushes the JSON line (so a crash loses no logged step) and the TensorBoard
  // scalars. Non-finite values are written as JSON null.
  absl::Status Log(const StepMetrics& metrics);

  // A restart's first save set the earlier run's steps aside: its metrics.jsonl becomes
  // metrics.jsonl.abandoned-<id>, this run's rows metrics.jsonl, and its TensorBoard points go out
  // behind a SessionLog START at step 0 that hides the earlier run's. No-op otherwise.
  absl::Status CommitRestart();

  const std::string& jsonl_path() const { return jsonl_path_; }

 private:
  MetricsLogger(const MetricsLoggerOptions& options, std::string jsonl_path, std::FILE* jsonl,
                std::unique_ptr<TensorBoardWriter> tensorboard, bool color)
      : options_(options),
        jsonl_path_(std::move(jsonl_path)),
        jsonl_(jsonl),
        tensorboard_(std::move(tensorboard)),
        restart_pending_(!options.restart_id.empty()),
        color_(color) {}

  absl::Status WriteTensorBoard(const StepMetrics& metrics);

  const MetricsLoggerOptions options_;
  std::string jsonl_path_;
  std::FILE* jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;    // null when TensorBoard is off (or waits)
  std::vector<StepMetrics> waiting_for_tensorboard_;  // a restart's points until CommitRestart
  bool restart_pending_;
  bool color_;
};

}  // namespace titan

#endif  // TITAN_LIB_METRICS_METRICS_LOGGER_H_
