#include "lib/profiling/profile_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/profiling/svg_plot.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// Categories bottom to top in the memory plots, with their colors.
const std::vector<PlotSeries>& MemorySeries() {
  static const std::vector<PlotSeries>* series = new std::vector<PlotSeries>{
      {"parameters", "#4e79a7"},  {"gradients", "#f28e2b"},     {"optimizer_state", "#59a14f"},
      {"activations", "#e15759"}, {"communication", "#b07aa1"}, {"other", "#bab0ac"}};
  return *series;
}
const std::vector<PlotSeries>& TimeSeries() {
  static const std::vector<PlotSeries>* series = new std::vector<PlotSeries>{
      {"compute", "#4e79a7"}, {"exposed communication", "#e15759"}, {"idle", "#bab0ac"}};
  return *series;
}

nlohmann::json CategoriesJson(const CategoryBytes& bytes) {
  nlohmann::json json = nlohmann::json::object();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    json[MemoryCategoryName(static_cast<MemoryCategory>(c))] = bytes[c];
  }
  return json;
}

absl::StatusOr<CategoryBytes> CategoriesFromJson(const nlohmann::json& json,
                                                 const std::string& source) {
  CategoryBytes bytes{};
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    TITAN_RETURN_IF_ERROR(ReadRequiredField(
        json, MemoryCategoryName(static_cast<MemoryCategory>(c)), source, bytes[c]));
  }
  return bytes;
}

nlohmann::json StepJson(const StepTime& step) {
  return {{"step", step.step},
          {"duration_ms", step.duration_ms},
          {"compute_ms", step.compute_ms},
          {"exposed_comm_ms", step.exposed_comm_ms},
          {"idle_ms", step.idle_ms}};
}

nlohmann::json OpJson(const OpStats& op) {
  nlohmann::json json = {{"name", op.name},
                         {"where", OpPlaceName(op.place)},
                         {"calls", op.calls},
                         {"self_ms", op.self_ms},
                         {"total_ms", op.total_ms},
                         {"input_shapes", op.input_shapes},
                         {"shape_variants", op.shape_variants}};
  json["flops"] = op.flops > 0 ? nlohmann::json(op.flops) : nlohmann::json();
  return json;
}

// Throws nlohmann::json::exception on a missing or mistyped field.
OpStats OpFromJson(const nlohmann::json& o) {
  OpStats op;
  op.name = o.at("name").get<std::string>();
  const std::string where = o.at("where").get<std::string>();
  for (OpPlace place : {OpPlace::kStepThread, OpPlace::kOtherThread, OpPlace::kDevice}) {
    if (where == OpPlaceName(place)) op.place = place;
  }
  op.calls = o.at("calls").get<int64_t>();
  op.self_ms = o.at("self_ms").get<double>();
  op.total_ms = o.at("total_ms").get<double>();
  op.flops = o.at("flops").is_null() ? 0 : o.at("flops").get<double>();
  op.input_shapes = o.at("input_shapes").get<std::string>();
  op.shape_variants = o.at("shape_variants").get<int64_t>();
  return op;
}

nlohmann::json OpsJson(const std::vector<OpStats>& ops) {
  nlohmann::json rows = nlohmann::json::array();
  for (const OpStats& op : ops) rows.push_back(OpJson(op));
  return rows;
}

// Mean over the traced steps.
StepTime MeanStep(const std::vector<StepTime>& steps) {
  StepTime mean;
  for (const StepTime& s : steps) {
    mean.duration_ms += s.duration_ms / steps.size();
    mean.compute_ms += s.compute_ms / steps.size();
    mean.exposed_comm_ms += s.exposed_comm_ms / steps.size();
    mean.idle_ms += s.idle_ms / steps.size();
  }
  return mean;
}

double StepsMs(const RankProfile& profile) {
  double total = 0;
  for (const StepTime& s : profile.steps) total += s.duration_ms;
  return total;
}

std::string MemoryPlot(const RankProfile& profile) {
  std::vector<double> x;
  std::vector<std::vector<double>> y(kNumMemoryCategories);
  for (const MemorySample& sample : profile.memory.samples) {
    x.push_back(sample.time_ms);
    for (int c = 0; c < kNumMemoryCategories; ++c) y[c].push_back(sample.bytes[c] / kMiB);
  }
  std::vector<std::pair<double, std::string>> markers;
  for (const auto& [step, at] : profile.memory.step_starts) {
    markers.emplace_back(at, absl::StrCat("step ", step));
  }
  return StackedAreaChart(absl::StrFormat("Rank %d: live tensor memory by category (peak %.1f MiB)",
                                          profile.rank, profile.memory.peak.total() / kMiB),
                          x, MemorySeries(), y, markers, "ms since the first traced step", "MiB");
}

std::string PeakTable(const std::vector<RankProfile>& ranks) {
  std::string html = "<table><tr><th>rank</th><th>peak MiB</th><th>at ms</th>";
  for (const PlotSeries& s : MemorySeries()) absl::StrAppend(&html, "<th>", s.name, " MiB</th>");
  html += "</tr>\n";
  for (const RankProfile& r : ranks) {
    absl::StrAppendFormat(&html, "<tr><td>%d</td><td>%.2f</td><td>%.1f</td>", r.rank,
                          r.memory.peak.total() / kMiB, r.memory.peak.time_ms);
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      absl::StrAppendFormat(&html, "<td>%.2f <span class=\"dim\">(max %.2f)</span></td>",
                            r.memory.peak.bytes[c] / kMiB, r.memory.max_bytes[c] / kMiB);
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

std::string OpRows(const std::vector<OpStats>& ops, double steps_ms) {
  std::string html =
      "<table><tr><th>op</th><th>where</th><th>calls</th><th>self ms</th><th>self %</th>"
      "<th>total ms</th><th>GFLOP</th><th>input shapes (most frequent)</th></tr>\n";
  for (const OpStats& op : ops) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%s</td><td>%s</td><td>%d</td><td>%.2f</td><td>%.1f</td><td>%.2f</td><td>%s</td>"
        "<td class=\"shapes\">%s%s</td></tr>\n",
        XmlEscape(op.name), OpPlaceName(op.place), op.calls, op.self_ms,
        steps_ms > 0 ? 100 * op.self_ms / steps_ms : 0, op.total_ms,
        op.flops > 0 ? absl::StrFormat("%.3f", op.flops / 1e9) : "-", XmlEscape(op.input_shapes),
        op.shape_variants > 1 ? absl::StrCat(" (+", op.shape_variants - 1, " more)") : "");
  }
  return html + "</table>\n";
}

std::string OpsTable(const RankProfile& r) {
  const double steps_ms = StepsMs(r);
  std::string html = OpRows(r.top_ops, steps_ms);
  absl::StrAppendFormat(&html,
                        "<p>These %d ops hold %.1f%% of the %.1f ms of traced steps (self time)."
                        "</p>\n",
                        r.top_ops.size(), steps_ms > 0 ? 100 * r.top_ops_self_ms / steps_ms : 0,
                        steps_ms);
  if (!r.other_ops.empty()) {
    html +=
        "<p>Beside the step (not part of its time): the busiest ops of other threads, e.g. "
        "Gloo's workers running collectives.</p>\n" +
        OpRows(r.other_ops, steps_ms);
  }
  return html;
}

}  // namespace

RankProfile MakeRankProfile(int rank, const std::string& trace_file,
                            const TraceAnalysis& analysis) {
  RankProfile profile;
  profile.rank = rank;
  profile.trace_file = trace_file;
  profile.steps = analysis.steps;
  profile.device_timeline = analysis.device_timeline;
  for (const OpStats& op : analysis.ops) {
    if (analysis.InStepTime(op) && profile.top_ops.size() < kTopOps) {
      profile.top_ops.push_back(op);
      profile.top_ops_self_ms += op.self_ms;
    } else if (!analysis.InStepTime(op) && profile.other_ops.size() < kTopOtherOps) {
      profile.other_ops.push_back(op);
    }
  }
  return profile;
}

std::string MissingDeviceTimelineWarning(const ProfileRunInfo& info,
                                         const std::vector<RankProfile>& ranks) {
  if (info.device == "cpu") return "";
  std::vector<int> missing;
  for (const RankProfile& r : ranks) {
    if (!r.device_timeline) missing.push_back(r.rank);
  }
  if (missing.empty()) return "";
  return absl::StrCat(
      "the traces of rank(s) ", absl::StrJoin(missing, ", "),
      " hold no GPU kernels: Kineto found no CUPTI (libcupti.so of the CUDA toolkit, or the "
      "nvidia-cuda-cupti wheel's, must be on LD_LIBRARY_PATH). Their step split and op table are "
      "the host's, where CUDA ops only launch kernels");
}

std::string SummaryLine(const RankProfile& profile) {
  const StepTime mean = MeanStep(profile.steps);
  const double steps_ms = StepsMs(profile);
  return absl::StrFormat(
      "rank %d: step %.1f ms = compute %.1f + exposed comm %.1f + idle %.1f; peak memory %.1f "
      "MiB; top %d ops %.1f%% of step time",
      profile.rank, mean.duration_ms, mean.compute_ms, mean.exposed_comm_ms, mean.idle_ms,
      profile.memory.peak.total() / kMiB, profile.top_ops.size(),
      steps_ms > 0 ? 100 * profile.top_ops_self_ms / steps_ms : 0);
}

nlohmann::json RankProfileToJson(const RankProfile& profile) {
  nlohmann::json json = {{"rank", profile.rank},
                         {"trace_file", profile.trace_file},
                         {"top_ops_self_ms", profile.top_ops_self_ms},
                         {"device_timeline", profile.device_timeline}};
  json["steps"] = nlohmann::json::array();
  for (const StepTime& s : profile.steps) json["steps"].push_back(StepJson(s));
  json["top_ops"] = OpsJson(profile.top_ops);
  json["other_ops"] = OpsJson(profile.other_ops);
  const MemoryTimeline& m = profile.memory;
  nlohmann::json memory = {{"peak_time_ms", m.peak.time_ms},
                           {"peak", CategoriesJson(m.peak.bytes)},
                           {"max", CategoriesJson(m.max_bytes)},
                           {"events", m.events}};
  memory["step_starts"] = m.step_starts;
  memory["samples"] = nlohmann::json::array();
  for (const MemorySample& s : m.samples) {
    nlohmann::json row = {s.time_ms};
    for (int64_t b : s.bytes) row.push_back(b);
    memory["samples"].push_back(row);
  }
  json["memory"] = memory;
  return json;
}

absl::StatusOr<RankProfile> RankProfileFromJson(const nlohmann::json& json) {
  const std::string source = "rank profile";
  RankProfile p;
  try {
    p.rank = json.at("rank").get<int>();
    p.trace_file = json.at("trace_file").get<std::string>();
    p.top_ops_self_ms = json.at("top_ops_self_ms").get<double>();
    p.device_timeline = json.at("device_timeline").get<bool>();
    for (const nlohmann::json& s : json.at("steps")) {
      p.steps.push_back(StepTime{s.at("step").get<int64_t>(), s.at("duration_ms").get<double>(),
                                 s.at("compute_ms").get<double>(),
                                 s.at("exposed_comm_ms").get<double>(),
                                 s.at("idle_ms").get<double>()});
    }
    for (const nlohmann::json& o : json.at("top_ops")) p.top_ops.push_back(OpFromJson(o));
    for (const nlohmann::json& o : json.at("other_ops")) p.other_ops.push_back(OpFromJson(o));
    const nlohmann::json& m = json.at("memory");
    p.memory.peak.time_ms = m.at("peak_time_ms").get<double>();
    TITAN_ASSIGN_OR_RETURN(p.memory.peak.bytes, CategoriesFromJson(m.at("peak"), source));
    TITAN_ASSIGN_OR_RETURN(p.memory.max_bytes, CategoriesFromJson(m.at("max"), source));
    p.memory.events = m.at("events").get<int64_t>();
    p.memory.step_starts = m.at("step_starts").get<std::vector<std::pair<int64_t, double>>>();
    for (const nlohmann::json& row : m.at("samples")) {
      MemorySample sample;
      sample.time_ms = row.at(0).get<double>();
      for (int c = 0; c < kNumMemoryCategories; ++c) sample.bytes[c] = row.at(c + 1).get<int64_t>();
      p.memory.samples.push_back(sample);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return p;
}

nlohmann::json OpTableJson(const TraceAnalysis& analysis) { return OpsJson(analysis.ops); }

int64_t GlobalBatch(const ProfileRunInfo& info) {
  return info.microbatches * info.local_batch_size * info.dp_size;
}

nlohmann::json SummaryJson(const ProfileRunInfo& info, const std::vector<RankProfile>& ranks) {
  nlohmann::json json = {{"model", info.model},
                         {"device", info.device},
                         {"world_size", info.world_size},
                         {"parallelism", info.parallelism},
                         {"warmup_steps", info.warmup},
                         {"active_steps", info.active},
                         {"local_batch_size", info.local_batch_size},
                         {"microbatches_per_step", info.microbatches},
                         {"global_batch_size", GlobalBatch(info)},
                         {"seq_len", info.seq_len},
                         {"tokens_per_step", GlobalBatch(info) * info.seq_len}};
  json["ranks"] = nlohmann::json::array();
  for (const RankProfile& r : ranks) {
    const StepTime mean = MeanStep(r.steps);
    nlohmann::json rank = {{"rank", r.rank},
                           {"trace", r.trace_file},
                           {"timeline", r.device_timeline ? "device" : "host"}};
    rank["step_time_ms"] = mean.duration_ms;
    rank["breakdown_ms"] = {{"compute", mean.compute_ms},
                            {"exposed_comm", mean.exposed_comm_ms},
                            {"idle", mean.idle_ms}};
    rank["steps"] = nlohmann::json::array();
    for (const StepTime& s : r.steps) rank["steps"].push_back(StepJson(s));
    rank["peak_memory_bytes"] = r.memory.peak.total();
    rank["peak_memory_by_category"] = CategoriesJson(r.memory.peak.bytes);
    rank["max_memory_by_category"] = CategoriesJson(r.memory.max_bytes);
    const double steps_ms = StepsMs(r);
    rank["top_ops_share_of_step_time"] = steps_ms > 0 ? r.top_ops_self_ms / steps_ms : 0;
    rank["top_ops"] = OpsJson(r.top_ops);
    rank["other_ops"] = OpsJson(r.other_ops);
    json["ranks"].push_back(rank);
  }
  return json;
}

std::string ReportHtml(const ProfileRunInfo& info, const std::vector<RankProfile>& ranks) {
  std::string html =
      absl::StrCat("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>titan profile: ",
                   XmlEscape(info.model),
                   "</title>\n<style>body{font-family:sans-serif;margin:24px;max-width:1100px}"
                   "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;"
                   "padding:3px 8px;text-align:right;font-size:13px;white-space:nowrap}"
                   "td:first-child,th:first-child{text-align:left}td.shapes{text-align:left;"
                   "font-family:monospace;font-size:11px;white-space:normal}"
                   ".dim{color:#888}svg{display:block;margin:8px 0 16px}</style></head><body>\n");
  absl::StrAppendFormat(
      &html,
      "<h1>titan profile: %s</h1>\n<p>%s, %d rank(s), %s; %d warmup + %d traced steps, each of "
      "%d microbatch(es) of %d x %d tokens per rank, %d tokens per step in all. Traces: ",
      XmlEscape(info.model), XmlEscape(info.device), info.world_size, XmlEscape(info.parallelism),
      info.warmup, info.active, info.microbatches, info.local_batch_size, info.seq_len,
      GlobalBatch(info) * info.seq_len);
  for (const RankProfile& r : ranks) {
    absl::StrAppend(&html, "<code>", XmlEscape(r.trace_file), "</code> ");
  }
  html += "(open in ui.perfetto.dev or chrome://tracing).</p>\n";
  const std::string warning = MissingDeviceTimelineWarning(info, ranks);
  if (!warning.empty()) {
    absl::StrAppend(&html, "<p><b>Warning</b>: ", XmlEscape(warning), ".</p>\n");
  }
  html += "<h2>Step time</h2>\n";
  std::vector<std::string> labels;
  std::vector<std::vector<double>> split;
  for (const RankProfile& r : ranks) {
    const StepTime mean = MeanStep(r.steps);
    labels.push_back(absl::StrCat("rank ", r.rank));
    split.push_back({mean.compute_ms, mean.exposed_comm_ms, mean.idle_ms});
  }
  html += StackedBarChart("Mean step time per rank", labels, TimeSeries(), split, "ms");
  html +=
      "<p>Compute: inside ATen ops (CPU) or GPU kernels; exposed communication: waiting in a "
      "collective with no compute running; idle: neither.</p>\n<table><tr><th>rank</th>"
      "<th>step</th><th>ms</th><th>compute</th><th>exposed comm</th><th>idle</th></tr>\n";
  for (const RankProfile& r : ranks) {
    for (const StepTime& s : r.steps) {
      absl::StrAppendFormat(&html,
                            "<tr><td>%d</td><td>%d</td><td>%.1f</td><td>%.1f</td><td>%.1f</td>"
                            "<td>%.1f</td></tr>\n",
                            r.rank, s.step, s.duration_ms, s.compute_ms, s.exposed_comm_ms,
                            s.idle_ms);
    }
  }
  html += "</table>\n<h2>Memory</h2>\n";
  for (const RankProfile& r : ranks) html += MemoryPlot(r);
  html +=
      "<p>Peak of live tensor bytes and each category's share at that moment (and its own "
      "maximum). Parameters, gradients and optimizer state are the blocks holding those tensors; "
      "other blocks count where they were allocated: inside a collective or FSDP gather/reduce "
      "(communication), inside forward or backward (activations), elsewhere (other).</p>\n";
  html += PeakTable(ranks);
  html += "<h2>Top ops</h2>\n";
  if (!ranks.empty()) {
    std::vector<std::string> names;
    std::vector<double> self_ms;
    for (const OpStats& op : ranks[0].top_ops) {
      names.push_back(op.name);
      self_ms.push_back(op.self_ms);
    }
    html += BarChart(absl::StrCat("Rank ", ranks[0].rank, ": self time of the top ops over ",
                                  ranks[0].steps.size(), " traced steps"),
                     names, self_ms, "ms", "#4e79a7");
  }
  for (const RankProfile& r : ranks) {
    absl::StrAppend(&html, "<h3>Rank ", r.rank, "</h3>\n", OpsTable(r));
  }
  return html + "</body></html>\n";
}

}  // namespace titan
