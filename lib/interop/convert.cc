#include "lib/interop/convert.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/hf_adapter.h"
#include "lib/interop/hf_config.h"
#include "lib/interop/meta_checkpoint.h"
#include "lib/interop/output_folder.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/json_file.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

// What transformers' tokenizers read from a model folder (recent versions keep the chat template
// in chat_template.jinja; vocab.json and merges.txt are BPE tokenizers' slow files).
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json",
                                           "tokenizer.model",
                                           "added_tokens.json",
                                           "chat_template.jinja",
                                           "vocab.json",
                                           "merges.txt"};
// Where transformers saves a tokenizer's named chat templates besides the default one.
constexpr char kChatTemplateDir[] = "additional_chat_templates";

// additional_chat_templates/<name>.jinja in `dir`, sorted (transformers reads every *.jinja).
absl::StatusOr<std::vector<std::string>> FindNamedChatTemplates(const std::string& dir) {
  const std::string templates = absl::StrCat(dir, "/", kChatTemplateDir);
  if (!IsDirectory(templates)) return std::vector<std::string>();
  TITAN_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(templates));
  std::sort(names.begin(), names.end());
  std::vector<std::string> found;
  for (const std::string& name : names) {
    if (absl::EndsWith(name, ".jinja")) found.push_back(absl::StrCat(kChatTemplateDir, "/", name));
  }
  return found;
}

// A tokenizer file an export copies: read from `source`, written as `name` (relative to both
// folders).
struct TokenizerFile {
  std::string source;
  std::string name;
};

// The tokenizer files of options.tokenizer_dir (tokenizer.json: options.tokenizer_json when set),
// checked before any weights are written.
absl::StatusOr<std::vector<TokenizerFile>> FindTokenizerFiles(const HfExportOptions& options) {
  const std::string& dir = options.tokenizer_dir;
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(
        "--tokenizer_dir: ", dir, ": ", PathExists(dir) ? "not a directory" : "no such directory"));
  }
  std::vector<TokenizerFile> found;
  for (const char* name : kTokenizerFiles) {
    // A tokenizer_json that is gone fails its read rather than leaving the export without it.
    if (absl::string_view(name) == "tokenizer.json" && !options.tokenizer_json.empty()) {
      found.push_back({options.tokenizer_json, name});
    } else if (PathExists(absl::StrCat(dir, "/", name))) {
      found.push_back({absl::StrCat(dir, "/", name), name});
    }
  }
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("--tokenizer_dir: ", dir, ": none of ", absl::StrJoin(kTokenizerFiles, ", ")));
  }
  // transformers json.loads each one: a malformed file fails the export's loading, so it is refused
  // here, even where titan does not read that tokenizer.
  for (const TokenizerFile& file : found) {
    if (!absl::EndsWith(file.name, ".json")) continue;
    const absl::Status parsed = ReadJsonFile(file.source).status();
    if (!parsed.ok()) {
      return absl::Status(parsed.code(), absl::StrCat("--tokenizer_dir: ", parsed.message()));
    }
  }
  TITAN_ASSIGN_OR_RETURN(std::vector<std::string> templates, FindNamedChatTemplates(dir));
  for (std::string& name : templates) found.push_back({absl::StrCat(dir, "/", name), name});
  return found;
}

// --tokenizer_dir's tokenizer for an export of `info`: one with tokenizer files, whose ids the
// model embeds (transformers indexes past the embedding at the first id beyond it). A tokenizer
// titan does not read (slow files alone, another model type) is copied unchecked. A model that
// names neither BOS nor EOS id (a Meta checkpoint) takes the tokenizer's, as the trainer's exports
// do: generate() stops at no EOS otherwise.
absl::Status CheckExportTokenizer(const std::string& dir, ModelInfo& info) {
  HfExportOptions options;
  options.tokenizer_dir = dir;
  TITAN_RETURN_IF_ERROR(FindTokenizerFiles(options).status());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  if (!tokenizer.ok()) {
    LOG(WARNING) << "--tokenizer_dir: " << dir << ": not checked against the model's "
                 << info.args.vocab_size << " embedded ids: " << tokenizer.status().message();
    return absl::OkStatus();
  }
  TITAN_RETURN_IF_ERROR(CheckTokenizerFitsModel((*tokenizer)->vocab_size(), info,
                                                absl::StrCat("--tokenizer_dir: ", dir)));
  if (info.bos_token_id.is_null() && info.eos_token_id.is_null()) {
    const std::optional<int32_t> bos = (*tokenizer)->bos_id();
    info.bos_token_id = bos ? json(*bos) : json();
    info.eos_token_id = (*tokenizer)->eos_id();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<at::ScalarType>> ParseDtype(const std::string& dtype) {
  if (dtype == "keep") return std::optional<at::ScalarType>();
  if (dtype == "bf16") return std::optional<at::ScalarType>(at::kBFloat16);
  if (dtype == "fp32") return std::optional<at::ScalarType>(at::kFloat);
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype: \"", dtype, "\", expected keep, bf16 or fp32"));
}

// config.json's torch_dtype: torch's name without "torch.", which transformers reads back.
std::string TorchDtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kDouble:
      return "float64";
    default:  // c10 spells the rest as torch does, capitalised ("Float8_e4m3fn").
      return absl::AsciiStrToLower(c10::toString(type));
  }
}

// Produces each output tensor: source tensor, layout change, dtype change.
class TensorProducer {
 public:
  TensorProducer(const CheckpointReader& reader, const ModelInfo& info,
                 std::optional<at::ScalarType> dtype, CheckpointFormat to,
                 const std::atomic<int>* stop_signal = nullptr)
      : reader_(reader), info_(info), dtype_(dtype), to_(to), stop_signal_(stop_signal) {}

  // Checked before each tensor is read and after each is written, so that a long write ends at
  // the next tensor.
  absl::Status CheckStop() const { return CheckStopSignal(stop_signal_); }

  absl::StatusOr<at::Tensor> Produce(const ParameterSource& param) const {
    TITAN_RETURN_IF_ERROR(CheckStop());
    absl::StatusOr<at::Tensor> tensor = reader_.Get(param.source_name);
    if (!tensor.ok()) return tensor.status();
    at::Tensor out = *tensor;
    if (reader_.format() == CheckpointFormat::kHf) {
      out = HfTensorToTitan(param.titan_name, out, info_.args);
    }
    if (to_ == CheckpointFormat::kHf) out = TitanTensorToHf(param.titan_name, out, info_.args);
    if (dtype_ && out.is_floating_point()) out = out.to(*dtype_);
    return out;
  }

  at::ScalarType OutputType(const ParameterSource& param) const {
    const at::ScalarType type = reader_.Find(param.source_name)->scalar_type;
    return dtype_ && at::isFloatingType(type) ? *dtype_ : type;
  }

  uint64_t OutputBytes(const ParameterSource& param) const {
    uint64_t numel = 1;
    for (int64_t size : reader_.Find(param.source_name)->shape) numel *= size;
    return numel * c10::elementSize(OutputType(param));
  }

 private:
  const CheckpointReader& reader_;
  const ModelInfo& info_;
  std::optional<at::ScalarType> dtype_;
  CheckpointFormat to_;
  const std::atomic<int>* stop_signal_;
};

absl::Status WriteJson(const std::string& path, const json& value) {
  return WriteFileAtomically(path, value.dump(2) + "\n");
}

absl::Status WriteHf(const std::vector<ParameterSource>& params, const TensorProducer& producer,
                     const ModelInfo& info, const HfExportOptions& options,
                     const std::string& output, ConvertSummary& summary) {
  std::vector<TokenizerFile> tokenizer_files;
  if (!options.tokenizer_dir.empty()) {
    TITAN_ASSIGN_OR_RETURN(tokenizer_files, FindTokenizerFiles(options));
  }
  // Shards planned from metadata alone: every file name is known before the first is written.
  std::vector<uint64_t> tensor_bytes;
  for (const ParameterSource& param : params) tensor_bytes.push_back(producer.OutputBytes(param));
  std::vector<std::vector<const ParameterSource*>> shards;
  for (const std::vector<size_t>& planned : PlanHfShards(tensor_bytes, options.max_shard_bytes)) {
    shards.emplace_back();
    for (size_t index : planned) shards.back().push_back(&params[index]);
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1 ? "model.safetensors"
                                                : absl::StrFormat("model-%05d-of-%05d.safetensors",
                                                                  i + 1, shards.size());
    NamedTensors tensors;
    for (const ParameterSource* param : shards[i]) {
      absl::StatusOr<at::Tensor> tensor = producer.Produce(*param);
      if (!tensor.ok()) return tensor.status();
      TITAN_ASSIGN_OR_RETURN(std::string hf_name, TitanToHfName(param->titan_name));
      weight_map[hf_name] = file;
      summary.bytes += tensor->numel() * tensor->element_size();
      tensors.emplace_back(std::move(hf_name), *std::move(tensor));
    }
    TITAN_RETURN_IF_ERROR(WriteSafetensors(
        absl::StrCat(output, "/", file), tensors, {{"format", "pt"}},
        [&](const std::string&, absl::string_view) { return producer.CheckStop(); }));
    summary.files.push_back(file);
    summary.tensors += static_cast<int64_t>(tensors.size());
    LOG(INFO) << "wrote " << output << "/" << file << " (" << tensors.size() << " tensors)";
  }
  if (shards.size() > 1) {
    const json index = {{"metadata", {{"total_size", summary.bytes}}}, {"weight_map", weight_map}};
    TITAN_RETURN_IF_ERROR(WriteJson(absl::StrCat(output, "/model.safetensors.index.json"), index));
    summary.files.push_back("model.safetensors.index.json");
  }
  const std::string torch_dtype = TorchDtypeName(producer.OutputType(params.front()));
  TITAN_RETURN_IF_ERROR(
      WriteJson(absl::StrCat(output, "/config.json"), HfConfig(info, torch_dtype)));
  TITAN_RETURN_IF_ERROR(
      WriteJson(absl::StrCat(output, "/generation_config.json"), HfGenerationConfig(info)));
  summary.files.push_back("config.json");
  summary.files.push_back("generation_config.json");
  for (const TokenizerFile& file : tokenizer_files) {
    TITAN_ASSIGN_OR_RETURN(std::string contents, ReadFile(file.source));
    const std::string path = absl::StrCat(output, "/", file.name);
    TITAN_RETURN_IF_ERROR(MakeDirectories(Dirname(path)));  // additional_chat_templates/
    TITAN_RETURN_IF_ERROR(WriteFileAtomically(path, contents));
    summary.files.push_back(file.name);
  }
  return absl::OkStatus();
}

// WriteHf into `output` through WriteFolderAtomically: either still empty or whole.
absl::Status WriteHfAtomically(const std::vector<ParameterSource>& params,
                               const TensorProducer& producer, const ModelInfo& info,
                               const HfExportOptions& options, const std::string& output,
                               ConvertSummary& summary) {
  return WriteFolderAtomically(output, [&](const std::string& folder) {
    return WriteHf(params, producer, info, options, folder, summary);
  });
}

// A model in memory seen as a titan checkpoint, so that an export goes through the conversion's
// own parameter matching, layout and dtype code.
class InMemoryCheckpoint : public CheckpointReader {
 public:
  static absl::StatusOr<std::unique_ptr<InMemoryCheckpoint>> Create(const NamedTensors& model,
                                                                    std::string description) {
    auto reader = std::unique_ptr<InMemoryCheckpoint>(new InMemoryCheckpoint());
    reader->format_ = CheckpointFormat::kTitan;
    reader->directory_ = std::move(description);
    for (const auto& [name, tensor] : model) {
      absl::StatusOr<std::string> dtype = SafetensorsDtypeName(tensor.scalar_type());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(reader->directory_, ": tensor ", name, ": ", dtype.status().message()));
      }
      reader->tensors_.push_back({name, *dtype, tensor.scalar_type(), tensor.sizes().vec(),
                                  static_cast<uint64_t>(tensor.nbytes()), ""});
      reader->by_name_[name] = tensor;
    }
    return reader;
  }

  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
    }
    return it->second.to(at::kCPU).contiguous();
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    const auto it = by_name_.find(name);
    if (it == by_name_.end() || !it->second.is_cpu() || !it->second.is_contiguous()) {
      return absl::FailedPreconditionError(
          absl::StrCat(directory_, ": '", name, "' is not a contiguous CPU tensor in memory"));
    }
    return absl::string_view(static_cast<const char*>(it->second.data_ptr()), it->second.nbytes());
  }

  // Tensors in memory carry no checksums to verify.
  std::vector<std::string> Verify() const override { return {}; }

 private:
  absl::flat_hash_map<std::string, at::Tensor> by_name_;
};

absl::Status WriteTitan(const std::vector<ParameterSource>& params, const TensorProducer& producer,
                        const ModelInfo& info, int64_t step, const std::string& output,
                        const std::atomic<int>* stop_signal, ConvertSummary& summary) {
  CheckpointState state;
  for (const ParameterSource& param : params) {
    absl::StatusOr<at::Tensor> tensor = producer.Produce(param);
    if (!tensor.ok()) return tensor.status();
    summary.bytes += tensor->numel() * tensor->element_size();
    state.model.emplace_back(param.titan_name, *std::move(tensor));
  }
  // The shape travels with the tensors, so converting back needs no --flavor.
  state.extra["model"] = ModelInfoToJson(info);
  CheckpointManager manager(output, /*keep_latest_k=*/0);
  manager.set_stop_signal(stop_signal);
  TITAN_RETURN_IF_ERROR(manager.Save(step, state, /*model_only=*/true));
  summary.output = manager.StepDirectory(step);
  summary.tensors = static_cast<int64_t>(state.model.size());
  summary.files = {"model.safetensors", "manifest.json"};
  return absl::OkStatus();
}

absl::Status WriteMeta(const std::vector<ParameterSource>& params, const TensorProducer& producer,
                       const ModelInfo& info, const json& meta_params, const std::string& output,
                       ConvertSummary& summary) {
  std::vector<std::string> names;
  std::vector<const ParameterSource*> sources;
  for (const ParameterSource& param : params) {
    names.push_back(param.titan_name);
    sources.push_back(&param);
    // Meta's reference model has its own output layer, and Meta's tied checkpoints (Llama 3.2 1B
    // and 3B) hold a copy of the embedding for it.
    if (info.args.tie_word_embeddings && param.titan_name == "tok_embeddings.weight") {
      names.push_back("output.weight");
      sources.push_back(&param);
    }
  }
  TITAN_RETURN_IF_ERROR(WriteMetaCheckpoint(
      output, names,
      [&](size_t i) -> absl::StatusOr<at::Tensor> {
        absl::StatusOr<at::Tensor> tensor = producer.Produce(*sources[i]);
        if (tensor.ok()) summary.bytes += tensor->numel() * tensor->element_size();
        return tensor;
      },
      meta_params));
  summary.tensors = static_cast<int64_t>(names.size());
  summary.files = {"consolidated.00.pth", "params.json"};
  return absl::OkStatus();
}

}  // namespace

std::vector<std::vector<size_t>> PlanHfShards(const std::vector<uint64_t>& tensor_bytes,
                                              uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const uint64_t bytes = tensor_bytes[i];
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  // A model of no tensors still has its one (empty) model.safetensors.
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  constexpr std::pair<const char*, uint64_t> kUnits[] = {{"KiB", 1ull << 10},
                                                         {"MiB", 1ull << 20},
                                                         {"GiB", 1ull << 30},
                                                         {"KB", 1'000},
                                                         {"MB", 1'000'000},
                                                         {"GB", 1'000'000'000},
                                                         {"B", 1}};
  absl::string_view number = text;
  uint64_t unit = 1;
  for (const auto& [suffix, scale] : kUnits) {
    if (absl::EndsWith(text, suffix)) {
      number = text.substr(0, text.size() - std::strlen(suffix));
      unit = scale;
      break;
    }
  }
  uint64_t value;
  if (number.empty() || !std::all_of(number.begin(), number.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(number, &value) || value == 0 || value > UINT64_MAX / unit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size \"", text, "\": expected a positive integer with an optional unit (KB, MB, GB, ",
        "KiB, MiB, GiB)"));
  }
  return value * unit;
}

absl::StatusOr<ConvertSummary> ConvertCheckpoint(const std::string& input,
                                                 const std::string& output_path,
                                                 const ConvertOptions& options) {
  if (!options.model.empty() && !FindModel(options.model).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model: unknown model \"", options.model,
                                                   "\"; expected one of ",
                                                   absl::StrJoin(RegisteredModelNames(), ", ")));
  }
  TITAN_ASSIGN_OR_RETURN(std::optional<at::ScalarType> dtype, ParseDtype(options.dtype));
  if (!options.tokenizer_dir.empty() && options.to != CheckpointFormat::kHf) {
    return absl::InvalidArgumentError("--tokenizer_dir applies to --to=hf only");
  }
  if (options.max_shard_bytes && options.to != CheckpointFormat::kHf) {
    return absl::InvalidArgumentError("--max_shard_size applies to --to=hf only");
  }
  if (options.max_shard_bytes && *options.max_shard_bytes == 0) {
    return absl::InvalidArgumentError("--max_shard_size must be positive");
  }
  if (options.step && options.to != CheckpointFormat::kTitan) {
    return absl::InvalidArgumentError("--step applies to --to=titan only");
  }
  if (options.step && *options.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step: ", *options.step, ", expected a step >= 0"));
  }
  std::optional<CheckpointFormat> from = options.from;
  if (!from) {
    TITAN_ASSIGN_OR_RETURN(from, DetectCheckpointFormat(input, "--from=meta reads the Meta one"));
  }
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                         CheckpointReader::Open(input, from));
  TITAN_ASSIGN_OR_RETURN(ModelInfo info,
                         DescribeCheckpoint(*reader, options.model, options.flavor));
  json meta_params;
  if (options.to == CheckpointFormat::kMeta) {
    if (!info.spec->meta) {
      return absl::InvalidArgumentError(absl::StrCat("--to=meta: ", info.name(),
                                                     " has no Meta format (", reader->directory(),
                                                     " holds ", DescribeModelInfo(info), ")"));
    }
    absl::StatusOr<json> described = info.spec->meta->params(info.args);
    if (!described.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--to=meta: ", reader->directory(), ": ", described.status().message()));
    }
    meta_params = *std::move(described);
  }
  TITAN_ASSIGN_OR_RETURN(std::vector<ParameterSource> params, MatchParameters(*reader, info));
  if (!options.tokenizer_dir.empty()) {
    TITAN_RETURN_IF_ERROR(CheckExportTokenizer(options.tokenizer_dir, info));
  }

  TITAN_ASSIGN_OR_RETURN(const std::string output, ResolveDotComponents(output_path));
  const bool output_existed = PathExists(output);
  // Refusals here remove nothing: `output` may be another conversion's. Its contents are judged
  // under the lock only: another conversion's committed step would read as "not empty".
  TITAN_ASSIGN_OR_RETURN(const std::unique_ptr<FolderLock> lock, LockFreeOutput(output));
  // A failed conversion leaves no output behind (an empty directory given as `output` stays, and
  // is emptied: it held nothing of another run's under the lock). The failure is the one to report.
  absl::Cleanup remove_output = [&] {
    (output_existed ? EmptyFolder(output) : RemoveTree(output)).IgnoreError();
  };

  ConvertSummary summary;
  summary.input = reader->directory();
  summary.output = output;
  summary.model = info.name();
  summary.flavor = info.flavor;
  const TensorProducer producer(*reader, info, dtype, options.to, options.stop_signal);
  switch (options.to) {
    case CheckpointFormat::kHf:
      TITAN_RETURN_IF_ERROR(
          WriteHfAtomically(params, producer, info,
                            {options.max_shard_bytes.value_or(HfExportOptions().max_shard_bytes),
                             options.tokenizer_dir},
                            output, summary));
      break;
    case CheckpointFormat::kTitan:
      TITAN_RETURN_IF_ERROR(WriteTitan(params, producer, info,
                                       options.step.value_or(reader->step().value_or(0)), output,
                                       options.stop_signal, summary));
      break;
    case CheckpointFormat::kMeta:
      TITAN_RETURN_IF_ERROR(WriteMeta(params, producer, info, meta_params, output, summary));
      break;
  }
  // Once the output is in place, so that a failure to publish it (a rename) is never preceded by
  // a success summary; a failure here removes the output (remove_output above).
  if (options.after_commit) TITAN_RETURN_IF_ERROR(options.after_commit(summary));
  LOG(INFO) << "converted " << summary.input << " (" << CheckpointFormatName(reader->format())
            << ") to " << summary.output << " (" << CheckpointFormatName(options.to)
            << "): " << summary.tensors << " tensors, " << summary.bytes << " bytes; "
            << DescribeModelInfo(info);
  std::move(remove_output).Cancel();
  return summary;
}

absl::Status SaveHfExport(const NamedTensors& model, const ModelInfo& info, at::ScalarType dtype,
                          const std::string& output_dir, const HfExportOptions& options) {
  if (options.max_shard_bytes == 0) {
    return absl::InvalidArgumentError("max_shard_bytes must be positive");
  }
  TITAN_ASSIGN_OR_RETURN(
      std::unique_ptr<InMemoryCheckpoint> reader,
      InMemoryCheckpoint::Create(model, absl::StrCat("model exported to ", output_dir)));
  TITAN_ASSIGN_OR_RETURN(std::vector<ParameterSource> params, MatchParameters(*reader, info));
  const TensorProducer producer(*reader, info, dtype, CheckpointFormat::kHf);
  ConvertSummary summary;
  // The trainer holds its checkpoint folder's lock: no other run writes here.
  TITAN_RETURN_IF_ERROR(CheckOutputIsFree(output_dir).status());
  TITAN_RETURN_IF_ERROR(WriteHfAtomically(params, producer, info, options, output_dir, summary));
  LOG(INFO) << "exported the model to " << output_dir << " (Hugging Face, "
            << TorchDtypeName(producer.OutputType(params.front())) << "): " << summary.tensors
            << " tensors, " << summary.bytes << " bytes";
  return absl::OkStatus();
}

}  // namespace titan
