#include "lib/metrics/metrics_logger.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/short_text.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace titan {

namespace {

// ANSI escapes, one color per field as in torchtitan's log line.
constexpr char kRed[] = "\033[31m";
constexpr char kGreen[] = "\033[32m";
constexpr char kYellow[] = "\033[33m";
constexpr char kBlue[] = "\033[34m";
constexpr char kMagenta[] = "\033[35m";
constexpr char kCyan[] = "\033[36m";
constexpr char kTurquoise[] = "\033[38;2;54;234;195m";
constexpr char kReset[] = "\033[39m";

// Hand-written: absl has no digit grouping, and std::locale grouping depends on the host's locales.
std::string WithThousandsSeparators(double value) {
  const long long rounded = std::llround(value);
  std::string digits = std::to_string(rounded < 0 ? -rounded : rounded);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return rounded < 0 ? "-" + digits : digits;
}

// TensorBoardWriter::Create, its errors naming the key that chose the folder.
absl::StatusOr<std::unique_ptr<TensorBoardWriter>> OpenTensorBoard(const std::string& folder,
                                                                   int64_t purge_step) {
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
      TensorBoardWriter::Create(folder, purge_step);
  if (writer.ok()) return writer;
  return WithContext(writer.status(), "[metrics] save_tb_folder");
}

// The step's scalars under their metrics.jsonl keys or torchtitan's TensorBoard tags; an
// evaluation-only row has no update's, a step without an optimizer step none that measure one.
std::vector<std::pair<std::string, double>> Scalars(const StepMetrics& metrics,
                                                    bool tensorboard_tags) {
  std::vector<std::pair<std::string, double>> scalars;
  if (!metrics.evaluation_only) {
    if (metrics.updated) {
      scalars.insert(scalars.end(),
                     {{tensorboard_tags ? "loss_metrics/global_avg_loss" : "loss", metrics.loss},
                      {"grad_norm", metrics.grad_norm}});
    }
    scalars.emplace_back("lr", metrics.lr);
    if (metrics.updated) {
      scalars.insert(scalars.end(), {{tensorboard_tags ? "throughput(tps)" : "tps", metrics.tps},
                                     {"tflops", metrics.tflops}});
      if (metrics.mfu.has_value()) {
        scalars.emplace_back(tensorboard_tags ? "mfu(%)" : "mfu", *metrics.mfu);
      }
    }
    scalars.emplace_back(tensorboard_tags ? "memory/max_reserved(GiB)" : "memory_gib",
                         metrics.memory_gib);
  }
  if (metrics.validation_loss.has_value()) {
    scalars.emplace_back(tensorboard_tags ? "validation_metrics/loss" : "validation_loss",
                         *metrics.validation_loss);
  }
  scalars.insert(scalars.end(), metrics.extra.begin(), metrics.extra.end());
  return scalars;
}

// Hides the points the existing ones of `folders` hold from `purge_step` on: an event file
// holding only a SessionLog START there, as a writer that resumes starts its own.
absl::Status HidePointsFrom(const std::vector<std::string>& folders, int64_t purge_step) {
  for (const std::string& folder : folders) {
    if (!IsDirectory(folder)) continue;
    TITAN_RETURN_IF_ERROR(OpenTensorBoard(folder, purge_step).status());
  }
  return absl::OkStatus();
}

}  // namespace

std::string FormatStepLine(const StepMetrics& metrics, bool color) {
  const auto paint = [color](const char* ansi) { return color ? ansi : ""; };
  std::string line = absl::StrFormat("%sstep: %2d", paint(kRed), metrics.step);
  if (!metrics.evaluation_only) {
    if (metrics.updated) {
      absl::StrAppendFormat(&line, "  %sloss: %7.4f  %sgrad_norm: %7.4f", paint(kGreen),
                            metrics.loss, paint(kYellow), metrics.grad_norm);
    }
    absl::StrAppendFormat(&line, "  %slr: %.1e  %smemory: %5.2fGiB", paint(kCyan), metrics.lr,
                          paint(kTurquoise), metrics.memory_gib);
    if (metrics.updated) {
      absl::StrAppendFormat(&line, "  %stps: %s  %stflops: %.2f", paint(kBlue),
                            WithThousandsSeparators(metrics.tps), paint(kCyan), metrics.tflops);
      if (metrics.mfu.has_value()) {
        absl::StrAppendFormat(&line, "  %smfu: %.2f%%", paint(kMagenta), *metrics.mfu);
      }
    }
  }
  if (metrics.validation_loss.has_value()) {
    absl::StrAppendFormat(&line, "  %svalidation_loss: %7.4f", paint(kGreen),
                          *metrics.validation_loss);
  }
  for (const auto& [name, value] : metrics.extra) {
    absl::StrAppendFormat(&line, "  %s: %.4g", name, value);
  }
  absl::StrAppend(&line, paint(kReset));
  return line;
}

absl::StatusOr<std::unique_ptr<MetricsLogger>> MetricsLogger::Create(
    const MetricsLoggerOptions& options) {
  if (options.dump_folder.empty()) {
    return absl::InvalidArgumentError("metrics: dump_folder: expected a folder, got \"\"");
  }
  if (absl::Status made = MakeDirectories(options.dump_folder); !made.ok()) {
    return absl::Status(made.code(),
                        absl::StrCat("cannot create the dump folder: ", made.message()));
  }
  TITAN_ASSIGN_OR_RETURN(
      StepLog rows,
      StepLog::Start(absl::StrCat(options.dump_folder, "/metrics.jsonl"), options.start));
  std::vector<StepLog> unwritten;
  for (const std::string& folder : options.unwritten_dump_folders) {
    TITAN_ASSIGN_OR_RETURN(StepLog log,
                           StepLog::Start(absl::StrCat(folder, "/metrics.jsonl"), options.start));
    unwritten.push_back(std::move(log));
  }
  // A fresh run hides an earlier run's points as it sets its metrics.jsonl aside.
  const int64_t purge_step = std::max<int64_t>(options.start.resumed_step, 0) + 1;
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (!options.tensorboard_folder.empty() && !rows.commit_pending()) {
    TITAN_ASSIGN_OR_RETURN(tensorboard, OpenTensorBoard(options.tensorboard_folder, purge_step));
  }
  if (!rows.commit_pending()) {
    TITAN_RETURN_IF_ERROR(HidePointsFrom(options.unwritten_tensorboard_folders, purge_step));
  }
  // metrics.jsonl is opened at the first row (a run ended before it leaves no empty file), so
  // here only checked: an existing file must open for appending, else its folder take a new one.
  const std::string& rows_path = rows.rows_path();
  if (PathExists(rows_path)) {
    std::FILE* probe = std::fopen(rows_path.c_str(), "ae");
    if (probe == nullptr) return ErrnoError("open for append", rows_path);
    std::fclose(probe);
  } else if (::access(options.dump_folder.c_str(), W_OK) != 0) {
    return ErrnoError("create metrics.jsonl in", options.dump_folder);
  }
  const bool color = !options.disable_color_printing && ::isatty(STDERR_FILENO) == 1;
  return std::unique_ptr<MetricsLogger>(new MetricsLogger(
      options, std::move(rows), std::move(unwritten), std::move(tensorboard), color));
}

absl::Status MetricsLogger::CommitRestart() {
  if (!rows_.commit_pending()) return absl::OkStatus();
  TITAN_RETURN_IF_ERROR(rows_.Commit());
  for (StepLog& log : unwritten_rows_) TITAN_RETURN_IF_ERROR(log.Commit());
  TITAN_RETURN_IF_ERROR(HidePointsFrom(options_.unwritten_tensorboard_folders, /*purge_step=*/0));
  if (options_.tensorboard_folder.empty()) return absl::OkStatus();
  TITAN_ASSIGN_OR_RETURN(tensorboard_,
                         OpenTensorBoard(options_.tensorboard_folder, /*purge_step=*/0));
  for (const auto& [metrics, logged_at] : waiting_for_tensorboard_) {
    TITAN_RETURN_IF_ERROR(WriteTensorBoard(metrics, logged_at));
  }
  waiting_for_tensorboard_.clear();
  return absl::OkStatus();
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

absl::Status MetricsLogger::Log(const StepMetrics& metrics) {
  const absl::Time logged_at = absl::Now();
  LOG(INFO) << FormatStepLine(metrics, color_);

  nlohmann::ordered_json record;
  record["step"] = metrics.step;
  for (const auto& [name, value] : Scalars(metrics, /*tensorboard_tags=*/false)) {
    record[name] = value;
  }
  // Replace, not throw, on a name that is not UTF-8: a metrics line must never abort training.
  const std::string line = JsonText(record) + "\n";
  if (jsonl_ == nullptr) {
    // Appended, so a resumed run continues the same file.
    jsonl_ = std::fopen(rows_.rows_path().c_str(), "ae");  // e: O_CLOEXEC
    if (jsonl_ == nullptr) return ErrnoError("open for append", rows_.rows_path());
  }
  if (std::fwrite(line.data(), 1, line.size(), jsonl_) != line.size() || std::fflush(jsonl_) != 0) {
    return ErrnoError("append", rows_.rows_path());
  }
  if (tensorboard_ != nullptr) return WriteTensorBoard(metrics, logged_at);
  if (!options_.tensorboard_folder.empty())
    waiting_for_tensorboard_.emplace_back(metrics, logged_at);
  return absl::OkStatus();
}

absl::Status MetricsLogger::WriteTensorBoard(const StepMetrics& metrics, absl::Time logged_at) {
  for (const auto& [tag, value] : Scalars(metrics, /*tensorboard_tags=*/true)) {
    absl::Status status =
        tensorboard_->AddScalar(tag, static_cast<float>(value), metrics.step, logged_at);
    if (!status.ok()) return status;
  }
  return tensorboard_->Flush();
}

}  // namespace titan
