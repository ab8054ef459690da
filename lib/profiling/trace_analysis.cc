#include "lib/profiling/trace_analysis.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/util/gzip_file.h"
#include "lib/util/short_text.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kStepPrefix[] = "ProfilerStep#";
constexpr char kCommPrefix[] = "comm:";
// Kineto rounds timestamps to nanoseconds in microsecond units: nesting tolerates that much.
constexpr double kSlackUs = 1e-3;

using Interval = std::pair<double, double>;  // [begin, end) in microseconds

struct Event {
  std::string name;
  std::string category;
  std::string thread;  // pid/tid
  double begin = 0;
  double duration = 0;
  double self = 0;
  // Outlives the range it started in: an asynchronous operation's lifetime (c10d Gloo's send and
  // recv under pipeline parallelism), which runs beside the step rather than nested in it.
  bool detached = false;
  const nlohmann::json* input_dims = nullptr;

  double end() const { return begin + duration; }
};

bool IsDeviceCategory(const std::string& category) {
  return category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset";
}

// Sorted, disjoint.
std::vector<Interval> Union(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> merged;
  for (const Interval& interval : intervals) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

double Length(const std::vector<Interval>& disjoint, const Interval& window) {
  double total = 0;
  for (const auto& [begin, end] : disjoint) {
    total += std::max(0.0, std::min(end, window.second) - std::max(begin, window.first));
  }
  return total;
}

// The part of `a` outside `b` (both sorted and disjoint).
std::vector<Interval> Subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval rest : a) {
    while (j < b.size() && b[j].second <= rest.first) ++j;
    for (size_t k = j; k < b.size() && b[k].first < rest.second; ++k) {
      if (b[k].first > rest.first) out.emplace_back(rest.first, b[k].first);
      rest.first = std::max(rest.first, b[k].second);
    }
    if (rest.first < rest.second) out.push_back(rest);
  }
  return out;
}

// Self time per event: nesting follows timestamps within each thread, as Kineto records it.
void ComputeSelfTimes(std::vector<Event>& events) {
  std::map<std::string, std::vector<Event*>> by_thread;
  for (Event& event : events) by_thread[event.thread].push_back(&event);
  for (auto& [thread, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const Event* a, const Event* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->duration > b->duration;
    });
    std::vector<Event*> open;
    for (Event* event : list) {
      event->self = event->duration;
      while (!open.empty() && open.back()->end() <= event->begin + kSlackUs) open.pop_back();
      if (!open.empty() && event->end() > open.back()->end() + kSlackUs) {
        event->detached = true;
        continue;
      }
      if (!open.empty()) open.back()->self -= event->duration;
      open.push_back(event);
    }
  }
}

int64_t Product(const nlohmann::json& dims, size_t from, size_t to) {
  int64_t product = 1;
  for (size_t i = from; i < to; ++i) product *= dims[i].get<int64_t>();
  return product;
}

bool HasShape(const nlohmann::json& dims, size_t index, size_t rank) {
  return dims.is_array() && dims.size() > index && dims[index].is_array() &&
         dims[index].size() == rank &&
         std::all_of(dims[index].begin(), dims[index].end(),
                     [](const nlohmann::json& d) { return d.is_number_integer(); });
}

// 2·b·h·s_q·s_k·(d_q + d_v) forward; the backward recomputes the scores and runs four more
// products: 2·b·h·s_q·s_k·(3·d_q + 2·d_v).
double AttentionFlops(const nlohmann::json& dims, size_t query, bool backward) {
  if (!HasShape(dims, query, 4) || !HasShape(dims, query + 1, 4) || !HasShape(dims, query + 2, 4)) {
    return 0;
  }
  const nlohmann::json& q = dims[query];
  const double scores = static_cast<double>(Product(q, 0, 3)) * dims[query + 1][2].get<int64_t>();
  const double d_q = q[3].get<int64_t>();
  const double d_v = dims[query + 2][3].get<int64_t>();
  return 2 * scores * (backward ? 3 * d_q + 2 * d_v : d_q + d_v);
}

OpPlace PlaceOf(const Event& event, const std::string& step_thread) {
  if (IsDeviceCategory(event.category)) return OpPlace::kDevice;
  return event.thread == step_thread && !event.detached ? OpPlace::kStepThread
                                                        : OpPlace::kOtherThread;
}

struct Accumulator {
  OpStats stats;
  std::map<std::string, int64_t> shapes;
};

}  // namespace

const char* OpPlaceName(OpPlace place) {
  switch (place) {
    case OpPlace::kStepThread:
      return "step thread";
    case OpPlace::kOtherThread:
      return "other thread";
    case OpPlace::kDevice:
      return "device";
  }
  return "step thread";
}

double OpFlops(absl::string_view name, const nlohmann::json& dims) {
  // Matrix products: 2·m·k·n per matrix, the first operand [.., m, k] at `a`, the second at a+1.
  auto product = [&](size_t a, size_t rank) -> double {
    if (!HasShape(dims, a, rank) || !HasShape(dims, a + 1, rank)) return 0;
    const nlohmann::json& left = dims[a];
    return 2.0 * Product(left, 0, rank) * dims[a + 1][rank - 1].get<int64_t>();
  };
  if (name == "aten::mm") return product(0, 2);
  if (name == "aten::addmm") return product(1, 2);
  if (name == "aten::bmm") return product(0, 3);
  if (name == "aten::baddbmm") return product(1, 3);
  if (!absl::StartsWith(name, "aten::_scaled_dot_product_")) return 0;
  if (absl::EndsWith(name, "_backward")) return AttentionFlops(dims, 1, /*backward=*/true);
  return AttentionFlops(dims, 0, /*backward=*/false);
}

absl::StatusOr<TraceAnalysis> AnalyzeTrace(const nlohmann::json& trace, const std::string& source) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no traceEvents array"));
  }
  std::vector<Event> events;
  for (const nlohmann::json& raw : trace["traceEvents"]) {
    if (!raw.is_object() || raw.value("ph", "") != "X" || !raw.contains("ts") ||
        !raw.contains("dur") || !raw["ts"].is_number() || !raw["dur"].is_number()) {
      continue;
    }
    // Kineto's device-side copies of host ranges (ProfilerStep#N, forward, ...): no work of their
    // own, and a second step marker for each step.
    if (raw.value("cat", "") == "gpu_user_annotation") continue;
    Event event;
    event.name = raw.value("name", "");
    event.category = raw.value("cat", "");
    event.thread = absl::StrCat(raw.value("pid", nlohmann::json()).dump(), "/",
                                raw.value("tid", nlohmann::json()).dump());
    event.begin = raw["ts"].get<double>();
    event.duration = raw["dur"].get<double>();
    if (const auto args = raw.find("args"); args != raw.end() && args->is_object()) {
      if (const auto dims = args->find("Input Dims"); dims != args->end()) {
        event.input_dims = &*dims;
      }
    }
    events.push_back(std::move(event));
  }
  ComputeSelfTimes(events);

  std::vector<const Event*> markers;
  for (const Event& event : events) {
    if (absl::StartsWith(event.name, kStepPrefix)) markers.push_back(&event);
  }
  if (markers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no ", kStepPrefix, " range"));
  }
  std::sort(markers.begin(), markers.end(),
            [](const Event* a, const Event* b) { return a->begin < b->begin; });
  const std::string& step_thread = markers[0]->thread;
  std::vector<Interval> step_windows;
  for (const Event* marker : markers) step_windows.emplace_back(marker->begin, marker->end());
  const double trace_end =
      std::max_element(events.begin(), events.end(), [](const Event& a, const Event& b) {
        return a.end() < b.end();
      })->end();
  // Device work runs behind the host: a kernel belongs to the step whose host range launched it,
  // taken as the time from that step's start to the next one's.
  auto in_steps = [&](const Event& event) {
    if (IsDeviceCategory(event.category)) return event.begin >= markers[0]->begin;
    for (const Interval& window : step_windows) {
      if (event.begin >= window.first - kSlackUs && event.begin <= window.second) return true;
    }
    return false;
  };

  TraceAnalysis analysis;
  std::vector<Interval> host_compute, host_comm, device_compute, device_comm;
  std::map<std::pair<std::string, OpPlace>, Accumulator> by_name;
  for (const Event& event : events) {
    if (absl::StartsWith(event.name, kStepPrefix) || !in_steps(event)) continue;
    const OpPlace place = PlaceOf(event, step_thread);
    const bool device = place == OpPlace::kDevice;
    const Interval span(event.begin, event.end());
    if (device) {
      analysis.device_timeline = true;
      (absl::StrContains(absl::AsciiStrToLower(event.name), "nccl") ? device_comm : device_compute)
          .push_back(span);
    } else if (place == OpPlace::kStepThread) {
      if (absl::StartsWith(event.name, kCommPrefix)) host_comm.push_back(span);
      // ATen ops only: autograd's wrappers (autograd::engine::evaluate_function, *Backward0,
      // AccumulateGrad) are cpu_op events too, but their time outside the ATen ops they run is
      // bookkeeping, which idle holds.
      if (event.category == "cpu_op" && absl::StartsWith(event.name, "aten::")) {
        host_compute.push_back(span);
      }
    }
    Accumulator& acc = by_name[{event.name, place}];
    acc.stats.name = event.name;
    acc.stats.place = place;
    ++acc.stats.calls;
    acc.stats.self_ms += (device ? event.duration : event.self) / 1000;
    acc.stats.total_ms += event.duration / 1000;
    if (event.input_dims != nullptr) {
      acc.stats.flops += OpFlops(event.name, *event.input_dims);
      ++acc.shapes[JsonText(*event.input_dims)];
    }
  }
  const std::vector<Interval> comm_time = analysis.device_timeline
                                              ? Subtract(Union(device_comm), Union(device_compute))
                                              : Union(host_comm);
  const std::vector<Interval> compute_time =
      analysis.device_timeline ? Union(device_compute) : Subtract(Union(host_compute), comm_time);
  for (size_t i = 0; i < markers.size(); ++i) {
    const Event& marker = *markers[i];
    int64_t step = 0;
    if (!absl::SimpleAtoi(marker.name.substr(sizeof(kStepPrefix) - 1), &step)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": bad step range ", marker.name));
    }
    const Interval window =
        analysis.device_timeline
            ? Interval(marker.begin, i + 1 < markers.size() ? markers[i + 1]->begin : trace_end)
            : Interval(marker.begin, marker.end());
    StepTime time;
    time.step = step;
    time.duration_ms = (window.second - window.first) / 1000;
    time.compute_ms = Length(compute_time, window) / 1000;
    time.exposed_comm_ms = Length(comm_time, window) / 1000;
    time.idle_ms = std::max(0.0, time.duration_ms - time.compute_ms - time.exposed_comm_ms);
    analysis.steps.push_back(time);
  }
  for (auto& [key, acc] : by_name) {
    int64_t most = 0;
    for (const auto& [shapes, count] : acc.shapes) {
      if (count > most) {
        most = count;
        acc.stats.input_shapes = shapes;
      }
    }
    acc.stats.shape_variants = static_cast<int64_t>(acc.shapes.size());
    analysis.ops.push_back(std::move(acc.stats));
  }
  std::stable_sort(analysis.ops.begin(), analysis.ops.end(),
                   [](const OpStats& a, const OpStats& b) { return a.self_ms > b.self_ms; });
  return analysis;
}

absl::StatusOr<TraceAnalysis> AnalyzeTraceFile(const std::string& path) {
  TITAN_ASSIGN_OR_RETURN(const std::string text, ReadPlainOrGzipFile(path));
  const nlohmann::json trace = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not JSON"));
  return AnalyzeTrace(trace, path);
}

std::string FormatOpTable(const TraceAnalysis& analysis, size_t rows) {
  double step_ms = 0;
  for (const StepTime& step : analysis.steps) step_ms += step.duration_ms;
  std::string text =
      absl::StrFormat("%-56s %-12s %7s %11s %7s %11s %12s  %s\n", "op", "where", "calls", "self ms",
                      "self %", "total ms", "GFLOP", "input shapes");
  double shown = 0;
  for (size_t i = 0; i < std::min(rows, analysis.ops.size()); ++i) {
    const OpStats& op = analysis.ops[i];
    if (analysis.InStepTime(op)) shown += op.self_ms;
    std::string shapes = op.input_shapes;
    if (op.shape_variants > 1) absl::StrAppend(&shapes, " (+", op.shape_variants - 1, " more)");
    absl::StrAppendFormat(&text, "%-56s %-12s %7d %11.2f %6.1f%% %11.2f %12s  %s\n",
                          op.name.size() > 56 ? op.name.substr(0, 53) + "..." : op.name,
                          OpPlaceName(op.place), op.calls, op.self_ms,
                          step_ms > 0 ? 100 * op.self_ms / step_ms : 0.0, op.total_ms,
                          op.flops > 0 ? absl::StrFormat("%.3f", op.flops / 1e9) : "-", shapes);
  }
  absl::StrAppendFormat(
      &text, "%d of %d ops shown; those on the %s hold %.1f%% of the %.2f ms of %d traced steps\n",
      std::min(rows, analysis.ops.size()), analysis.ops.size(),
      analysis.device_timeline ? "device" : "step thread",
      step_ms > 0 ? 100 * shown / step_ms : 0.0, step_ms, analysis.steps.size());
  return text;
}

}  // namespace titan
