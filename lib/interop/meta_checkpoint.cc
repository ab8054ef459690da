#include "lib/interop/meta_checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/checkpoint/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kParamsFile[] = "params.json";
constexpr char kWeightsFile[] = "consolidated.00.pth";

class MetaReader : public CheckpointReader {
 public:
  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    const auto it = tensors_by_name_.find(name);
    if (it == tensors_by_name_.end()) {
      return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
    }
    return it->second;
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    absl::StatusOr<at::Tensor> tensor = Get(name);
    if (!tensor.ok()) return tensor.status();
    return absl::string_view(static_cast<const char*>(tensor->data_ptr()), tensor->nbytes());
  }

  // torch.save keeps no checksums; the zip reader already checked the archive's structure.
  std::vector<std::string> Verify() const override { return {}; }

  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& directory) {
    auto reader = std::unique_ptr<MetaReader>(new MetaReader());
    reader->format_ = CheckpointFormat::kMeta;
    reader->directory_ = directory;
    const std::string params_path = absl::StrCat(directory, "/", kParamsFile);
    TITAN_ASSIGN_OR_RETURN(std::string params_text, ReadFile(params_path));
    reader->description_ = json::parse(params_text, nullptr, /*allow_exceptions=*/false);
    if (!reader->description_.is_object()) {
      return absl::InvalidArgumentError(params_path + ": expected a JSON object");
    }
    if (PathExists(absl::StrCat(directory, "/consolidated.01.pth"))) {
      return absl::UnimplementedError(absl::StrCat(
          directory, ": model-parallel checkpoints (consolidated.01.pth ...) are not supported"));
    }
    const std::string path = absl::StrCat(directory, "/", kWeightsFile);
    if (!PathExists(path)) return absl::NotFoundError(path + ": no such file");
    c10::IValue loaded;
    try {
      caffe2::serialize::PyTorchStreamReader zip(path);
      loaded = torch::jit::readArchiveAndTensors("data", "", "", std::nullopt, std::nullopt,
                                                 at::Device(at::kCPU), zip);
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a torch.save state dict of tensors: ", e.what_without_backtrace()));
    }
    if (!loaded.isGenericDict()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected a dict of tensors, got ", loaded.tagKind()));
    }
    for (const auto& item : loaded.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": entry of type ", item.key().tagKind(),
                                                       " -> ", item.value().tagKind(),
                                                       ", expected string -> tensor"));
      }
      const std::string name = item.key().toStringRef();
      const at::Tensor tensor = item.value().toTensor().contiguous();
      absl::StatusOr<std::string> dtype = SafetensorsDtypeName(tensor.scalar_type());
      if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", dtype.status().message()));
      reader->tensors_.push_back({name, *dtype, tensor.scalar_type(), tensor.sizes().vec(),
                                  static_cast<uint64_t>(tensor.nbytes()), kWeightsFile});
      reader->tensors_by_name_[name] = tensor;
    }
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }

 private:
  absl::flat_hash_map<std::string, at::Tensor> tensors_by_name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory) {
  return MetaReader::Open(directory);
}

json Llama3MetaParams(const Llama3ModelInfo& info) {
  const Llama3Args& args = info.args;
  json params = {{"dim", args.dim},
                 {"n_layers", args.n_layers},
                 {"n_heads", args.n_heads},
                 {"n_kv_heads", args.kv_heads()},
                 {"vocab_size", args.vocab_size},
                 {"multiple_of", args.multiple_of},
                 {"norm_eps", args.norm_eps},
                 {"rope_theta", args.rope_theta},
                 {"use_scaled_rope", args.rope_scaling.factor > 0}};
  if (args.ffn_dim_multiplier > 0) params["ffn_dim_multiplier"] = args.ffn_dim_multiplier;
  return params;
}

absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromMetaParams(const json& params,
                                                              const std::string& source) {
  json args_json = params;
  const bool scaled = params.value("use_scaled_rope", false);
  args_json.erase("use_scaled_rope");
  if (!args_json.contains("n_kv_heads") || args_json.at("n_kv_heads").is_null()) {
    args_json["n_kv_heads"] = 0;
  }
  absl::StatusOr<Llama3Args> args = Llama3ArgsFromJson(args_json, source);
  if (!args.ok()) return args.status();
  if (scaled) args->rope_scaling = RopeScaling{8, 1, 4, 8192};
  Llama3ModelInfo info;
  info.args = *args;
  // Llama 3.2's flavors scale by 32; a shape match says which.
  for (const std::string& name : Llama3FlavorNames()) {
    Llama3Args flavor = *Llama3Flavor(name);
    Llama3Args candidate = *args;
    candidate.rope_scaling = flavor.rope_scaling;
    candidate.tie_word_embeddings = flavor.tie_word_embeddings;
    if (scaled == (flavor.rope_scaling.factor > 0) && MatchLlama3Flavor(candidate) == name) {
      flavor.vocab_size = args->vocab_size;
      info.args = flavor;
      info.flavor = name;
      break;
    }
  }
  if (info.args.vocab_size == 128256) {  // Llama 3's tokenizer: <|begin_of_text|>, <|end_of_text|>.
    info.bos_token_id = 128000;
    info.eos_token_id = 128001;
  }
  return info;
}

absl::Status WriteMetaCheckpoint(const std::string& directory, const NamedTensors& tensors,
                                 const Llama3ModelInfo& info) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.contiguous());
  std::vector<char> bytes;
  try {
    bytes = torch::jit::pickle_save(c10::IValue(dict));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(directory, "/", kWeightsFile, ": ", e.what_without_backtrace()));
  }
  TITAN_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(directory, "/", kWeightsFile),
                                            absl::string_view(bytes.data(), bytes.size())));
  return WriteFileAtomically(absl::StrCat(directory, "/", kParamsFile),
                             Llama3MetaParams(info).dump(2) + "\n");
}

}  // namespace titan
