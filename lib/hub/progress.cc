#include "lib/hub/progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace titan {
namespace {

constexpr int kBarWidth = 24;
constexpr int kMaxBars = 16;  // more active files than this show in the total only

std::string Rate(int64_t bytes, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (seconds <= 0) return "-";
  return absl::StrCat(HumanBytes(static_cast<int64_t>(bytes / seconds)), "/s");
}

std::string Eta(int64_t remaining, int64_t bytes, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (bytes <= 0 || seconds <= 0) return "ETA -";
  const int64_t eta = static_cast<int64_t>(remaining / (bytes / seconds));
  return absl::StrFormat("ETA %d:%02d", eta / 60, eta % 60);
}

std::string Bar(int64_t done, int64_t size) {
  const int filled = size > 0 ? static_cast<int>(kBarWidth * std::min(done, size) / size) : 0;
  return absl::StrCat("[", std::string(filled, '#'), std::string(kBarWidth - filled, '-'), "]");
}

int Percent(int64_t done, int64_t size) {
  return size > 0 ? static_cast<int>(100 * std::min(done, size) / size) : 100;
}

}  // namespace

std::string HumanBytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

ProgressReporter::ProgressReporter(FILE* out, bool terminal, int64_t total_bytes)
    : out_(out), terminal_(terminal), total_bytes_(total_bytes), started_(absl::Now()) {
  drawer_ = std::thread([this] { DrawLoop(); });
}

ProgressReporter::~ProgressReporter() { Close(); }

void ProgressReporter::Start(const std::string& path, int64_t size, int64_t done) {
  std::lock_guard<std::mutex> lock(mutex_);
  active_[path] = FileState{size, done, done, absl::Now()};
  if (!terminal_) {
    PrintLine(absl::StrCat(path, ": downloading ", HumanBytes(size),
                           done > 0 ? absl::StrCat(", resuming at ", HumanBytes(done)) : ""));
  }
}

void ProgressReporter::Advance(const std::string& path, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  fetched_ += bytes;
  auto it = active_.find(path);
  if (it != active_.end()) it->second.done += bytes;
}

void ProgressReporter::Rewind(const std::string& path, int64_t done) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(path);
  if (it == active_.end()) return;
  FileState& file = it->second;
  // Bytes fetched by this run and thrown away; bytes that were on disk and now must be fetched.
  rewound_ += std::max<int64_t>(0, file.done - std::max(file.at_start, done));
  total_bytes_ += std::max<int64_t>(0, file.at_start - done);
  file.done = done;
  file.at_start = std::min(file.at_start, done);
}

void ProgressReporter::Note(const std::string& path, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  PrintLine(absl::StrCat(path, ": ", message));
}

void ProgressReporter::Finish(const std::string& path, const std::string& summary) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(path);
  std::string line = absl::StrCat(path, ": ", summary);
  if (it != active_.end()) {
    const FileState& file = it->second;
    absl::StrAppend(&line, " (", HumanBytes(file.size), ", ",
                    Rate(file.done - file.at_start, absl::Now() - file.started), ")");
    active_.erase(it);
  }
  PrintLine(line);
}

void ProgressReporter::Close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
  }
  wake_.notify_all();
  drawer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  EraseBars();
  if (fetched_ > 0) PrintLine(TotalLine());
}

void ProgressReporter::DrawLoop() {
  const absl::Duration period = terminal_ ? absl::Milliseconds(200) : absl::Seconds(5);
  std::unique_lock<std::mutex> lock(mutex_);
  int64_t last_fetched = 0;
  while (!closed_) {
    wake_.wait_for(lock, absl::ToChronoMilliseconds(period));
    if (closed_) break;
    if (terminal_) {
      EraseBars();
      DrawBars();
    } else if (fetched_ != last_fetched) {
      PrintLine(TotalLine());
    }
    last_fetched = fetched_;
  }
}

void ProgressReporter::PrintLine(const std::string& line) {
  const int bars = drawn_lines_;
  EraseBars();
  std::fprintf(out_, "%s\n", line.c_str());
  if (bars > 0) DrawBars();
  std::fflush(out_);
}

void ProgressReporter::EraseBars() {
  for (; drawn_lines_ > 0; --drawn_lines_) std::fputs("\x1b[1A\x1b[2K", out_);
}

void ProgressReporter::DrawBars() {
  const absl::Time now = absl::Now();
  int shown = 0;
  for (const auto& [path, file] : active_) {
    if (shown++ == kMaxBars) break;
    std::fprintf(out_, "%-40.40s %s %3d%% %10s / %-10s %12s %s\n", path.c_str(),
                 Bar(file.done, file.size).c_str(), Percent(file.done, file.size),
                 HumanBytes(file.done).c_str(), HumanBytes(file.size).c_str(),
                 Rate(file.done - file.at_start, now - file.started).c_str(),
                 Eta(file.size - file.done, file.done - file.at_start, now - file.started).c_str());
    ++drawn_lines_;
  }
  std::fprintf(out_, "%s\n", TotalLine().c_str());
  ++drawn_lines_;
  std::fflush(out_);
}

std::string ProgressReporter::TotalLine() const {
  const int64_t done = fetched_ - rewound_;
  const absl::Duration elapsed = absl::Now() - started_;
  return absl::StrFormat("total: %s / %s %s(%d%%), %s, %s", HumanBytes(done),
                         HumanBytes(total_bytes_),
                         terminal_ ? absl::StrCat(Bar(done, total_bytes_), " ") : "",
                         Percent(done, total_bytes_), Rate(fetched_, elapsed),
                         Eta(total_bytes_ - done, fetched_, elapsed));
}

}  // namespace titan
