#include "lib/registry/model_spec.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/metrics/flops.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Owned for the whole process: specs are referenced by pointer from ModelInfo.
std::map<std::string, std::unique_ptr<ModelSpec>>& Registry() {
  static auto* registry = new std::map<std::string, std::unique_ptr<ModelSpec>>();
  return *registry;
}

}  // namespace

std::vector<std::string> ModelSpec::FlavorNames() const {
  std::vector<std::string> names;
  for (const auto& [flavor, args] : flavors) names.push_back(flavor);
  return names;
}

absl::StatusOr<TransformerArgs> ModelSpec::Flavor(const std::string& flavor) const {
  for (const auto& [candidate, args] : flavors) {
    if (candidate == flavor) return args;
  }
  return absl::NotFoundError(absl::StrCat("[model] flavor: unknown ", name, " flavor \"", flavor,
                                          "\"; expected one of ",
                                          absl::StrJoin(FlavorNames(), ", ")));
}

std::string ModelSpec::MatchFlavor(const TransformerArgs& args) const {
  for (const auto& [flavor, candidate] : flavors) {
    if (SameArchitecture(candidate, args)) return flavor;
  }
  return "";
}

std::unique_ptr<Decoder> ModelSpec::Build(const TransformerArgs& args,
                                          const at::TensorOptions& options,
                                          const DecoderPart& part) const {
  return std::make_unique<Decoder>(args, options, part);
}

int64_t DenseFlopsPerToken(const ModelSpec& spec, const TransformerArgs& args, int64_t seq_len) {
  DenseTransformerShape shape;
  for (const auto& [name, dims] : ParameterShapes(spec, args)) {
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    shape.num_params += numel;
  }
  shape.num_embedding_params = args.vocab_size * args.dim;
  shape.tied_output = args.tie_word_embeddings;
  shape.n_layers = args.n_layers;
  shape.n_heads = args.n_heads;
  shape.head_dim = args.head_size();
  shape.seq_len = seq_len;
  return NumFlopsPerToken(shape);
}

void RegisterModel(ModelSpec spec) {
  CHECK(!spec.name.empty()) << "a model spec needs a name";
  CHECK(spec.parallelize) << spec.name << ": a model spec needs a parallelize function";
  if (!spec.flops_per_token) {
    // The registry owns the spec at a stable address; capture its name, look it up on use.
    const std::string name = spec.name;
    spec.flops_per_token = [name](const TransformerArgs& args, int64_t seq_len) {
      return DenseFlopsPerToken(**FindModel(name), args, seq_len);
    };
  }
  const std::string name = spec.name;
  CHECK(Registry().emplace(name, std::make_unique<ModelSpec>(std::move(spec))).second)
      << "model " << name << " is registered twice";
}

absl::StatusOr<const ModelSpec*> FindModel(const std::string& name) {
  const auto it = Registry().find(name);
  if (it == Registry().end()) {
    return absl::NotFoundError(absl::StrCat("[model] name: unknown model \"", name,
                                            "\"; expected one of ",
                                            absl::StrJoin(RegisteredModelNames(), ", ")));
  }
  return it->second.get();
}

std::vector<std::string> RegisteredModelNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : Registry()) names.push_back(name);
  return names;
}

const std::string& ModelInfo::name() const { return spec->name; }

ModelInfo DescribeModel(const ModelSpec& spec, const TransformerArgs& args,
                        nlohmann::json bos_token_id, nlohmann::json eos_token_id) {
  ModelInfo info;
  info.spec = &spec;
  info.args = args;
  info.flavor = spec.MatchFlavor(args);
  info.bos_token_id = std::move(bos_token_id);
  info.eos_token_id = std::move(eos_token_id);
  return info;
}

absl::Status CheckTokenizerFitsModel(int64_t tokenizer_ids, const ModelInfo& info,
                                     absl::string_view tokenizer_key) {
  if (tokenizer_ids <= info.args.vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      tokenizer_key, ": the tokenizer has ", tokenizer_ids, " ids but ", info.name(), " ",
      info.flavor.empty() ? "(custom shape)" : info.flavor, " embeds only ", info.args.vocab_size));
}

nlohmann::json ModelInfoToJson(const ModelInfo& info) {
  nlohmann::json out = {{"name", info.name()},
                        {"flavor", info.flavor},
                        {"args", TransformerArgsToJson(info.args)},
                        {"bos_token_id", info.bos_token_id},
                        {"eos_token_id", info.eos_token_id}};
  // Left out when unset, so entries of models without them read as they always did.
  if (!info.pad_token_id.is_null()) out["pad_token_id"] = info.pad_token_id;
  if (!info.hf_generation_config.is_null()) out["hf_generation_config"] = info.hf_generation_config;
  return out;
}

absl::StatusOr<ModelInfo> ModelInfoFromJson(const nlohmann::json& object,
                                            const std::string& source,
                                            const std::string& default_model) {
  if (!object.is_object() || !object.contains("args")) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected an object with \"args\", got ", object.type_name()));
  }
  std::string name = default_model;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "name", source, name));
  absl::StatusOr<const ModelSpec*> spec = FindModel(name);
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", spec.status().message()));
  TITAN_ASSIGN_OR_RETURN(
      TransformerArgs args,
      TransformerArgsFromJson(object.at("args"), (*spec)->defaults, source + ": args"));
  ModelInfo info = DescribeModel(**spec, args, object.value("bos_token_id", nlohmann::json()),
                                 object.value("eos_token_id", nlohmann::json()));
  info.pad_token_id = object.value("pad_token_id", nlohmann::json());
  info.hf_generation_config = object.value("hf_generation_config", nlohmann::json());
  if (!info.hf_generation_config.is_null() && !info.hf_generation_config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": hf_generation_config: expected an object, got ",
                     info.hf_generation_config.type_name()));
  }
  return info;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> ParameterShapes(
    const ModelSpec& spec, const TransformerArgs& args) {
  std::unique_ptr<Decoder> model = spec.Build(args, at::TensorOptions().device(at::kMeta));
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const ParamRef& param : model->NamedParameters()) {
    shapes.emplace_back(param.name, param.tensor->sizes().vec());
  }
  return shapes;
}

}  // namespace titan
