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
#include "absl/time/time.h"
#include "lib/metrics/step_log.h"
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
  // Model FLOPs utilization in percent; none where the device's peak is unknown (a CPU).
  std::optional<double> mfu;
  double memory_gib = 0;  // peak device memory (peak RSS on CPU)
  std::optional<double> validation_loss;
  // Any other scalars; each name is the JSON key, the log-line label and the TensorBoard tag.
  std::vector<std::pair<std::string, double>> extra;
  // A row of evaluations before any update (RL's step 0): loss through memory_gib are left out.
  bool evaluation_only = false;
  // False for a step without an optimizer step (RL's dynamic sampling dropped every group): loss,
  // grad_norm, tps, tflops and mfu, which measure the update, are left out (a 0 would read as one).
  bool updated = true;
};

struct MetricsLoggerOptions {
  std::string dump_folder;         // metrics.jsonl is appended to here; created if missing
  // Where event files go ([metrics] save_tb_folder, which its errors name); empty: no TensorBoard.
  std::string tensorboard_folder;
  bool disable_color_printing = false;
  // How the run continues the folder's metrics.jsonl (StepLog) and TensorBoard points: a resumed
  // run's redone steps and a fresh run's earlier points are hidden (a SessionLog START, PyTorch's
  // purge_step); a restart's points wait in memory until CommitRestart.
  StepLogStart start;
  // The folder's metrics outputs this run does not write (other ranks', a TensorBoard folder now
  // off): they follow `start` as this run's own do, so that every output shows each step once.
  std::vector<std::string> unwritten_dump_folders;         // their metrics.jsonl
  std::vector<std::string> unwritten_tensorboard_folders;  // those that exist get a START
};

// The log line for one step, e.g.
// "step: 12  loss:  5.1234  grad_norm:  1.2345  lr: 8.0e-04  memory:  0.52GiB  tps: 12,345
// tflops: 0.12  mfu: 0.05%", with ANSI colors when `color` (no mfu where it is unknown, none of
// the update's metrics for a step without one).
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

  // A restart's first save set the earlier run's steps aside: so go its metrics.jsonl (StepLog::
  // Commit) and TensorBoard points (this run's go out behind a SessionLog START at step 0 that
  // hides them), the unwritten outputs' with them. No-op otherwise.
  absl::Status CommitRestart();

  const std::string& jsonl_path() const { return rows_.rows_path(); }

 private:
  MetricsLogger(const MetricsLoggerOptions& options, StepLog rows, std::vector<StepLog> unwritten,
                std::unique_ptr<TensorBoardWriter> tensorboard, bool color)
      : options_(options),
        rows_(std::move(rows)),
        unwritten_rows_(std::move(unwritten)),
        tensorboard_(std::move(tensorboard)),
        color_(color) {}

  absl::Status WriteTensorBoard(const StepMetrics& metrics, absl::Time logged_at);

  const MetricsLoggerOptions options_;
  StepLog rows_;  // metrics.jsonl
  std::vector<StepLog> unwritten_rows_;  // options_.unwritten_dump_folders' metrics.jsonl
  std::FILE* jsonl_ = nullptr;                        // opened by the first Log
  std::unique_ptr<TensorBoardWriter> tensorboard_;    // null when TensorBoard is off (or waits)
  // A restart's points until CommitRestart, with the times they were logged at.
  std::vector<std::pair<StepMetrics, absl::Time>> waiting_for_tensorboard_;
  bool color_;
};

}  // namespace titan

#endif  // TITAN_LIB_METRICS_METRICS_LOGGER_H_
