#include "lib/interop/inspect.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/hf_adapter.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr int64_t kChunkElements = int64_t{1} << 24;

json StatsToJson(const TensorStats& stats) {
  // JSON has no NaN: statistics over no finite values (std: fewer than two) are null.
  const auto value = [](double x) { return std::isnan(x) ? json() : json(x); };
  return {{"min", value(stats.min)},      {"max", value(stats.max)},
          {"mean", value(stats.mean)},    {"std", value(stats.std)},
          {"nan_count", stats.nan_count}, {"inf_count", stats.inf_count}};
}

// A difference or tolerance: strict JSON has no Infinity, so an infinite one is the string "inf".
json MagnitudeJson(double x) { return std::isinf(x) ? json("inf") : json(x); }

// Where a tensor is: "file" when one file holds it, else "pieces" and the distinct "files".
void AddTensorLocation(const TensorInfo& tensor, json& entry) {
  if (tensor.piece_files.empty()) {
    entry["file"] = tensor.file;
    return;
  }
  std::vector<std::string> files;
  for (const std::string& file : tensor.piece_files) {
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
  }
  entry["pieces"] = tensor.piece_files.size();
  entry["files"] = files;
}

// The text listing's last column: the file, or how many pieces ranks saved it in.
std::string TensorLocation(const TensorInfo& tensor) {
  return tensor.piece_files.empty() ? tensor.file
                                    : absl::StrCat(tensor.piece_files.size(), " pieces");
}

// A checkpoint's tensors under the names a comparison uses, and how to fetch each one.
struct ComparableTensors {
  std::unique_ptr<CheckpointReader> reader;
  absl::StatusOr<ModelInfo> described;  // the model the checkpoint holds, read once
  std::optional<ModelInfo> model;       // Set when comparing in titan's names and layout.
  std::map<std::string, std::string> source_names;  // comparison name -> name in the checkpoint

  absl::StatusOr<at::Tensor> Get(const std::string& name) const {
    absl::StatusOr<at::Tensor> tensor = reader->Get(source_names.at(name));
    if (!tensor.ok() || !model || reader->format() != CheckpointFormat::kHf) return tensor;
    return HfTensorToTitan(name, *tensor, model->args);
  }
};

// `verify`: an HF folder's damage is a finding too (as InspectCheckpoint's under --verify).
absl::StatusOr<ComparableTensors> OpenComparable(const std::string& path, bool verify) {
  ComparableTensors out;
  // An HF folder lists its damage only where CRCs go unchecked; it has none to check.
  bool verify_checksums = true;
  if (verify) {
    TITAN_ASSIGN_OR_RETURN(const CheckpointFormat format, DetectCheckpointFormat(path));
    verify_checksums = format != CheckpointFormat::kHf;
  }
  // Opened to inspect: a damaged file is reported as one, not a checkpoint it cannot read.
  TITAN_ASSIGN_OR_RETURN(out.reader, CheckpointReader::Open(path, std::nullopt, verify_checksums,
                                                            /*inspect=*/true));
  out.described = DescribeCheckpoint(*out.reader, "", "");
  for (const TensorInfo& tensor : out.reader->tensors()) {
    out.source_names[tensor.name] = tensor.name;
  }
  return out;
}

// Re-keys `side` by titan parameter names (HF q/k un-permuted on fetch).
absl::Status UseTitanNames(ComparableTensors& side) {
  TITAN_RETURN_IF_ERROR(side.described.status());
  const ModelInfo& info = *side.described;
  TITAN_ASSIGN_OR_RETURN(std::vector<ParameterSource> params, MatchParameters(*side.reader, info));
  side.source_names.clear();
  for (const ParameterSource& param : params)
    side.source_names[param.titan_name] = param.source_name;
  side.model = info;
  return absl::OkStatus();
}

constexpr char kHfHead[] = "lm_head.weight";
constexpr char kHfEmbedding[] = "model.embed_tokens.weight";

// Whether `reader` is an HF folder whose config.json ties the head to the embedding.
bool DeclaresTiedHead(const CheckpointReader& reader) {
  if (reader.format() != CheckpointFormat::kHf) return false;
  const json& config = reader.description();
  const auto tie = config.find("tie_word_embeddings");
  return tie != config.end() && tie->is_boolean() && tie->get<bool>();
}

// Whether `reader`'s tensors `a` and `b` are bitwise equal (dtype, shape and bytes).
absl::StatusOr<bool> BitwiseEqual(const CheckpointReader& reader, const char* a, const char* b) {
  const TensorInfo *x = reader.Find(a), *y = reader.Find(b);
  if (x->scalar_type != y->scalar_type || x->shape != y->shape) return false;
  TITAN_ASSIGN_OR_RETURN(absl::string_view x_bytes, reader.Bytes(a));
  TITAN_ASSIGN_OR_RETURN(absl::string_view y_bytes, reader.Bytes(b));
  return x_bytes == y_bytes;
}

// What to say of `side`'s lm_head.weight when its config.json ties it to the embedding ("" when
// nothing). A bitwise copy of the embedding is the tie itself (older writers saved one), so it is
// not compared when `other` lacks it (titan's names never list it); a head of its own is named:
// transformers reads that model untied.
absl::StatusOr<std::string> TiedHeadNote(ComparableTensors& side, const ComparableTensors& other,
                                         const std::string& which) {
  const CheckpointReader& reader = *side.reader;
  if (!DeclaresTiedHead(reader) || reader.Find(kHfHead) == nullptr ||
      reader.Find(kHfEmbedding) == nullptr) {
    return "";
  }
  TITAN_ASSIGN_OR_RETURN(const bool copy, BitwiseEqual(reader, kHfHead, kHfEmbedding));
  if (!copy) {
    return absl::StrCat(kHfHead, " in the ", which, " differs from ", kHfEmbedding,
                        " though its config.json ties them (tie_word_embeddings true): "
                        "transformers reads that model untied");
  }
  if (side.source_names.count(kHfHead) > 0 && other.source_names.count(kHfHead) > 0) return "";
  side.source_names.erase(kHfHead);
  return absl::StrCat(kHfHead, " in the ", which, " equals ", kHfEmbedding,
                      " bitwise: the tie its config.json declares (tie_word_embeddings true), not "
                      "a tensor of its own");
}

bool IsInverseFrequencyBuffer(absl::string_view name) {
  return absl::EndsWith(name, ".rotary_emb.inv_freq");
}

// What to say of `side`'s rotary_emb.inv_freq buffers ("" when none) that `other` lacks: older
// transformers saved them, loading drops them (RoPE comes from config.json), so they are left out.
std::string InverseFrequencyNote(ComparableTensors& side, const ComparableTensors& other,
                                 const std::string& which) {
  if (side.reader->format() != CheckpointFormat::kHf) return "";
  int dropped = 0;
  if (side.model) {
    // In titan's names (the other side is titan or Meta): MatchParameters left them all out.
    for (const TensorInfo& tensor : side.reader->tensors()) {
      if (IsInverseFrequencyBuffer(tensor.name)) ++dropped;
    }
  }
  for (auto it = side.source_names.begin(); it != side.source_names.end();) {
    if (IsInverseFrequencyBuffer(it->first) && other.source_names.count(it->first) == 0) {
      it = side.source_names.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  if (dropped == 0) return "";
  return absl::StrCat(dropped, " rotary_emb.inv_freq buffer(s) in the ", which,
                      " left out: transformers drops them on load (RoPE comes from config.json)");
}

// `differs`: beyond the tolerances; `values_differ`: at all.
TensorDifference Compare(const std::string& name, const at::Tensor& a, const at::Tensor& b,
                         double rtol, double atol, bool& differs, bool& values_differ) {
  TensorDifference diff;
  diff.name = name;
  differs = false;
  values_differ = false;
  if (a.sizes() != b.sizes()) {
    diff.problem =
        absl::StrCat("shape ", ShapeString(a.sizes().vec()), " vs ", ShapeString(b.sizes().vec()));
    differs = true;
    return diff;
  }
  if (a.scalar_type() != b.scalar_type()) {
    diff.problem = absl::StrCat("dtype ", c10::toString(a.scalar_type()), " vs ",
                                c10::toString(b.scalar_type()));
    differs = true;
  }
  const at::Tensor flat_a = a.reshape({-1}), flat_b = b.reshape({-1});
  diff.max_abs_diff = 0;
  diff.max_rel_diff = 0;
  for (int64_t begin = 0; begin < flat_a.numel(); begin += kChunkElements) {
    const int64_t end = std::min(flat_a.numel(), begin + kChunkElements);
    const at::Tensor x = flat_a.slice(0, begin, end).to(at::kDouble);
    const at::Tensor y = flat_b.slice(0, begin, end).to(at::kDouble);
    const at::Tensor finite = x.isfinite() & y.isfinite();
    const at::Tensor same = (x == y) | (x.isnan() & y.isnan());  // Also equal infinities.
    const at::Tensor nonfinite_mismatch = ~finite & ~same;
    const at::Tensor abs_diff = at::where(finite, (x - y).abs(), at::zeros_like(x));
    // As torch.testing.assert_close: inf where b is 0 and a is not.
    const at::Tensor rel_diff = at::where(abs_diff > 0, abs_diff / y.abs(), at::zeros_like(x));
    const int64_t mismatches = nonfinite_mismatch.sum().item<int64_t>();
    diff.nonfinite_mismatches += mismatches;
    if (!values_differ && !same.all().item<bool>()) values_differ = true;
    if (mismatches > 0 || (abs_diff > atol + rtol * y.abs()).any().item<bool>()) differs = true;
    diff.max_abs_diff = std::max(*diff.max_abs_diff, abs_diff.max().item<double>());
    diff.max_rel_diff = std::max(*diff.max_rel_diff, rel_diff.max().item<double>());
  }
  return diff;
}

// Appends `problem` to `damaged` unless there already: both sides may be one checkpoint.
void AddDamaged(std::string problem, std::vector<std::string>& damaged) {
  if (std::find(damaged.begin(), damaged.end(), problem) == damaged.end()) {
    damaged.push_back(std::move(problem));
  }
}

}  // namespace

TensorStats ComputeTensorStats(const at::Tensor& tensor) {
  TensorStats stats;
  const at::Tensor flat = tensor.reshape({-1});
  int64_t count = 0;  // Finite values seen.
  double mean = 0, m2 = 0;
  bool any_finite = false;
  for (int64_t begin = 0; begin < flat.numel(); begin += kChunkElements) {
    const at::Tensor chunk =
        flat.slice(0, begin, std::min(flat.numel(), begin + kChunkElements)).to(at::kDouble);
    stats.nan_count += chunk.isnan().sum().item<int64_t>();
    stats.inf_count += chunk.isinf().sum().item<int64_t>();
    const at::Tensor finite = chunk.masked_select(chunk.isfinite());
    const int64_t n = finite.numel();
    if (n == 0) continue;
    const double chunk_min = finite.min().item<double>(), chunk_max = finite.max().item<double>();
    stats.min = any_finite ? std::min(stats.min, chunk_min) : chunk_min;
    stats.max = any_finite ? std::max(stats.max, chunk_max) : chunk_max;
    any_finite = true;
    const double chunk_mean = finite.mean().item<double>();
    const double chunk_m2 = (finite - chunk_mean).pow(2).sum().item<double>();
    // Chan et al.'s parallel merge of (count, mean, M2): stable where sum-of-squares is not.
    const double delta = chunk_mean - mean;
    const int64_t total = count + n;
    mean += delta * n / total;
    m2 += chunk_m2 + delta * delta * static_cast<double>(count) * n / total;
    count = total;
  }
  if (count == 0) {
    stats.min = stats.max = stats.mean = stats.std = std::numeric_limits<double>::quiet_NaN();
    return stats;
  }
  stats.mean = mean;
  // Bessel's correction, as torch.std (the reference users compare with); one value has none.
  stats.std = count > 1 ? std::sqrt(m2 / static_cast<double>(count - 1))
                        : std::numeric_limits<double>::quiet_NaN();
  return stats;
}

absl::StatusOr<InspectReport> InspectCheckpoint(const std::string& path,
                                                const InspectOptions& options) {
  // --verify lists every checksum problem, so its reads do not fail at the first; --stats alone
  // refuses a corrupted tensor.
  TITAN_ASSIGN_OR_RETURN(
      std::unique_ptr<CheckpointReader> reader,
      CheckpointReader::Open(path, std::nullopt, /*verify_checksums=*/!options.verify,
                             /*inspect=*/true));
  InspectReport report;
  report.directory = reader->directory();
  report.format = CheckpointFormatName(reader->format());
  report.step = reader->step();
  report.damaged = reader->Damaged();
  const bool opened_damaged = !report.damaged.empty();
  absl::StatusOr<ModelInfo> info = DescribeCheckpoint(*reader, "", "");
  // A damaged file of an HF or Meta checkpoint lists no tensors: its config.json (params.json)
  // names the model where the readable tensors agree with it (the damage is reported on its own).
  const bool absent_allowed = reader->format() != CheckpointFormat::kTitan && opened_damaged;
  const absl::Status matched =
      info.ok() ? MatchParameters(*reader, *info, nullptr, absent_allowed).status() : info.status();
  if (matched.ok()) {
    report.model = info->name();
    report.flavor = info->flavor;
    report.architecture = DescribeArchitecture(info->args);
  } else {
    report.model_unknown_reason = std::string(matched.message());
  }
  for (const TensorInfo& tensor : reader->tensors()) {
    InspectedTensor inspected{tensor, std::nullopt};
    int64_t elements = 1;
    for (int64_t size : tensor.shape) elements *= size;
    report.total_elements += elements;
    report.total_bytes += tensor.bytes;
    if (options.stats) {
      absl::StatusOr<at::Tensor> value = reader->Get(tensor.name);
      // A tensor in a damaged file gets no statistics; the file is listed in report.damaged, and
      // so is a tensor whose bytes fail their CRC (a finding, as under --verify).
      if (value.ok()) {
        inspected.stats = ComputeTensorStats(*value);
      } else if (absl::IsDataLoss(value.status())) {
        report.damaged.push_back(std::string(value.status().message()));
      } else if (!opened_damaged || !absl::IsFailedPrecondition(value.status())) {
        return value.status();
      }
    }
    report.tensors.push_back(std::move(inspected));
  }
  if (options.verify) {
    report.verified = true;
    report.problems = reader->Verify();
  }
  return report;
}

// A known model's flavor as both outputs word it: a named flavor, or "custom" for shapes none has.
std::string FlavorText(const InspectReport& report) {
  return report.flavor.empty() ? "custom" : report.flavor;
}

json InspectReportToJson(const InspectReport& report) {
  json tensors = json::array();
  for (const InspectedTensor& tensor : report.tensors) {
    json entry = {{"name", tensor.info.name},
                  {"dtype", tensor.info.dtype},
                  {"shape", tensor.info.shape},
                  {"bytes", tensor.info.bytes}};
    AddTensorLocation(tensor.info, entry);
    if (tensor.stats) entry["stats"] = StatsToJson(*tensor.stats);
    tensors.push_back(std::move(entry));
  }
  // null, not "", where the model is unknown: a script tests for null.
  const bool known = !report.model.empty();
  json out = {{"path", report.directory},
              {"format", report.format},
              {"step", report.step ? json(*report.step) : json()},
              {"model", known ? json(report.model) : json()},
              {"flavor", known ? json(FlavorText(report)) : json()},
              {"architecture", known ? json(report.architecture) : json()},
              {"model_unknown_reason", known ? json() : json(report.model_unknown_reason)},
              {"tensors", tensors},
              {"total_tensors", report.tensors.size()},
              {"total_elements", report.total_elements},
              {"total_bytes", report.total_bytes}};
  if (report.verified) {
    out["verify"] = {{"ok", report.problems.empty()}, {"problems", report.problems}};
  }
  if (!report.damaged.empty()) out["damaged"] = report.damaged;
  return out;
}

std::string FormatInspectReport(const InspectReport& report) {
  std::string out = absl::StrCat(
      report.directory, "\n  format ", report.format,
      report.step ? absl::StrCat(", step ", *report.step) : "", ", model ",
      report.model.empty() ? absl::StrCat("unknown (", report.model_unknown_reason, ")")
                           : report.model,
      report.model.empty() ? ""
                           : absl::StrCat(" ", FlavorText(report), " (", report.architecture, ")"),
      "\n");
  for (const InspectedTensor& tensor : report.tensors) {
    absl::StrAppend(&out, absl::StrFormat("  %-50s %-5s %-16s %12d  %s", tensor.info.name,
                                          tensor.info.dtype, ShapeString(tensor.info.shape),
                                          tensor.info.bytes, TensorLocation(tensor.info)));
    if (tensor.stats) {
      const TensorStats& s = *tensor.stats;
      absl::StrAppend(&out, absl::StrFormat("  min %.6g max %.6g mean %.6g std %.6g nan %d inf %d",
                                            s.min, s.max, s.mean, s.std, s.nan_count, s.inf_count));
    }
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, absl::StrFormat("  total: %d tensors, %d elements, %d bytes (%.1f MB)\n",
                                        report.tensors.size(), report.total_elements,
                                        report.total_bytes, report.total_bytes / 1e6));
  if (!report.damaged.empty() && !report.verified) {
    absl::StrAppend(&out, "  damaged: ", report.damaged.size(), " file(s)\n    ",
                    absl::StrJoin(report.damaged, "\n    "), "\n");
  }
  if (report.verified) {
    absl::StrAppend(&out,
                    report.problems.empty()
                        ? "  verify: OK\n"
                        : absl::StrCat("  verify: ", report.problems.size(), " problem(s)\n    ",
                                       absl::StrJoin(report.problems, "\n    "), "\n"));
  }
  return out;
}

absl::StatusOr<DiffReport> DiffCheckpoints(const std::string& first, const std::string& second,
                                           double rtol, double atol, bool verify) {
  for (const auto& [flag, tolerance] : {std::pair("--rtol", rtol), std::pair("--atol", atol)}) {
    if (!(tolerance >= 0)) {  // Also NaN.
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", tolerance, ", expected a tolerance >= 0"));
    }
  }
  TITAN_ASSIGN_OR_RETURN(ComparableTensors a, OpenComparable(first, verify));
  TITAN_ASSIGN_OR_RETURN(ComparableTensors b, OpenComparable(second, verify));
  DiffReport report;
  report.rtol = rtol;
  report.atol = atol;
  bool unlisted = false;  // An HF or Meta file that could not be read: its tensors are unknown.
  for (const ComparableTensors* side : {&a, &b}) {
    for (const std::string& damaged : side->reader->Damaged()) AddDamaged(damaged, report.damaged);
    unlisted = unlisted || (side->reader->format() != CheckpointFormat::kTitan &&
                            !side->reader->Damaged().empty());
  }
  if (unlisted) return report;
  if (a.reader->format() != b.reader->format()) {
    TITAN_RETURN_IF_ERROR(UseTitanNames(a));
    TITAN_RETURN_IF_ERROR(UseTitanNames(b));
  }
  if (a.described.ok() && b.described.ok()) {
    report.architecture = ArchitectureDifferences(a.described->args, b.described->args);
  }
  for (const auto& [side, other, which] :
       {std::tuple(&a, &b, "first"), std::tuple(&b, &a, "second")}) {
    TITAN_ASSIGN_OR_RETURN(std::string note, TiedHeadNote(*side, *other, which));
    if (!note.empty()) report.notes.push_back(std::move(note));
    note = InverseFrequencyNote(*side, *other, which);
    if (!note.empty()) report.notes.push_back(std::move(note));
  }
  for (const auto& [name, source] : a.source_names) {
    if (b.source_names.count(name) == 0) {
      report.only_in_first.push_back(name);
      continue;
    }
    const absl::StatusOr<at::Tensor> x = a.Get(name), y = b.Get(name);
    bool readable = true;
    for (const absl::StatusOr<at::Tensor>* value : {&x, &y}) {
      if (value->ok()) continue;
      // DataLoss: bytes that fail their CRC; FailedPrecondition: a file found damaged on opening.
      if (!absl::IsDataLoss(value->status()) && !absl::IsFailedPrecondition(value->status())) {
        return value->status();
      }
      AddDamaged(std::string(value->status().message()), report.damaged);
      readable = false;
    }
    if (!readable) continue;
    bool differs = false, values_differ = false;
    TensorDifference diff = Compare(name, *x, *y, rtol, atol, differs, values_differ);
    ++report.compared;
    if (differs) {
      report.different.push_back(std::move(diff));
    } else if (values_differ) {
      report.tolerated.push_back({name, *diff.max_abs_diff, *diff.max_rel_diff});
    }
  }
  for (const auto& [name, source] : b.source_names) {
    if (a.source_names.count(name) == 0) report.only_in_second.push_back(name);
  }
  return report;
}

json DiffReportToJson(const DiffReport& report) {
  json different = json::array();
  for (const TensorDifference& diff : report.different) {
    different.push_back(
        {{"name", diff.name},
         {"problem", diff.problem},
         {"max_abs_diff", diff.max_abs_diff ? MagnitudeJson(*diff.max_abs_diff) : json()},
         {"max_rel_diff", diff.max_rel_diff ? MagnitudeJson(*diff.max_rel_diff) : json()},
         {"nonfinite_mismatches", diff.nonfinite_mismatches}});
  }
  json tolerated = json::array();
  for (const ToleratedDifference& diff : report.tolerated) {
    tolerated.push_back({{"name", diff.name},
                         {"max_abs_diff", MagnitudeJson(diff.max_abs_diff)},
                         {"max_rel_diff", MagnitudeJson(diff.max_rel_diff)}});
  }
  return {{"identical", report.identical()},
          {"within_tolerance", report.within_tolerance()},
          {"rtol", MagnitudeJson(report.rtol)},
          {"atol", MagnitudeJson(report.atol)},
          {"tolerated", tolerated},
          {"compared", report.compared},
          {"only_in_first", report.only_in_first},
          {"only_in_second", report.only_in_second},
          {"different", different},
          {"notes", report.notes},
          {"damaged", report.damaged},
          {"architecture", report.architecture.empty() ? json() : json(report.architecture)}};
}

std::string FormatDiffReport(const DiffReport& report) {
  std::string out = absl::StrCat("compared ", report.compared, " tensors: ");
  if (report.identical()) {
    absl::StrAppend(&out, "identical\n");
  } else if (report.within_tolerance()) {
    double max_abs = 0, max_rel = 0;
    for (const ToleratedDifference& diff : report.tolerated) {
      max_abs = std::max(max_abs, diff.max_abs_diff);
      max_rel = std::max(max_rel, diff.max_rel_diff);
    }
    absl::StrAppend(
        &out, absl::StrFormat("within tolerance (rtol %g, atol %g): %d differ, by at most "
                              "%.6g absolute, %.6g relative\n",
                              report.rtol, report.atol, report.tolerated.size(), max_abs, max_rel));
  } else {
    absl::StrAppend(&out, report.damaged.empty() ? "DIFFERENT\n" : "DAMAGED\n");
  }
  for (const std::string& damaged : report.damaged) {
    absl::StrAppend(&out, "  damaged: ", damaged, "\n");
  }
  if (!report.architecture.empty()) {
    absl::StrAppend(&out, "  architecture: ", report.architecture, "\n");
  }
  for (const std::string& note : report.notes) absl::StrAppend(&out, "  note: ", note, "\n");
  for (const std::string& name : report.only_in_first) {
    absl::StrAppend(&out, "  only in the first: ", name, "\n");
  }
  for (const std::string& name : report.only_in_second) {
    absl::StrAppend(&out, "  only in the second: ", name, "\n");
  }
  for (const TensorDifference& diff : report.different) {
    absl::StrAppend(&out, absl::StrFormat("  %-50s ", diff.name));
    if (diff.max_abs_diff) {
      absl::StrAppend(&out, absl::StrFormat("max abs diff %.6g, max rel diff %.6g",
                                            *diff.max_abs_diff, *diff.max_rel_diff));
      if (diff.nonfinite_mismatches > 0) {
        absl::StrAppend(&out, " (finite elements), ", diff.nonfinite_mismatches,
                        " NaN/inf element(s) against another value");
      }
      if (!diff.problem.empty()) absl::StrAppend(&out, "; ");
    }
    absl::StrAppend(&out, diff.problem, "\n");
  }
  return out;
}

}  // namespace titan
