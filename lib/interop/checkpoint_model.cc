#include "lib/interop/checkpoint_model.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/hf_adapter.h"
#include "lib/interop/hf_config.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

// A mismatch names this many tensors and counts the rest: enough to see the pattern.
constexpr size_t kListedDifferences = 3;

// Whether the checkpoint holds exactly the parameters of `info`'s model, with their shapes.
bool ShapesMatch(const CheckpointReader& reader, const ModelInfo& info) {
  const auto shapes = ParameterShapes(*info.spec, info.args);
  if (shapes.size() != reader.tensors().size()) return false;
  for (const auto& [name, shape] : shapes) {
    const TensorInfo* found = reader.Find(name);
    if (found == nullptr || found->shape != shape) return false;
  }
  return true;
}

// A titan checkpoint whose manifest does not describe the model (trainer outputs from before
// models were recorded): the registered family and flavor its shapes match.
absl::StatusOr<ModelInfo> InferFromTitanShapes(const CheckpointReader& reader,
                                               const std::string& model_name,
                                               const std::string& flavor) {
  const TensorInfo* embedding = reader.Find("tok_embeddings.weight");
  if (embedding == nullptr || embedding->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        reader.directory(), ": no 2-D tok_embeddings.weight; not a titan decoder checkpoint"));
  }
  std::vector<ModelInfo> candidates;
  std::vector<std::string> searched;
  for (const std::string& name : RegisteredModelNames()) {
    if (!model_name.empty() && name != model_name) continue;
    const ModelSpec* spec = *FindModel(name);
    std::vector<std::string> flavors;
    for (const auto& [flavor_name, args] : spec->flavors) {
      if (!flavor.empty() && flavor_name != flavor) continue;
      ModelInfo info = DescribeModel(*spec, args);
      info.args.vocab_size = embedding->shape[0];
      info.flavor = flavor_name;
      candidates.push_back(std::move(info));
      flavors.push_back(flavor_name);
    }
    if (!flavors.empty())
      searched.push_back(absl::StrCat(name, ": ", absl::StrJoin(flavors, ", ")));
  }
  for (const ModelInfo& candidate : candidates) {
    if (ShapesMatch(reader, candidate)) return candidate;
  }
  // One named candidate: MatchParameters will say how the tensors differ from it.
  if (!flavor.empty() && candidates.size() == 1) return candidates.front();
  return absl::InvalidArgumentError(
      absl::StrCat(reader.directory(),
                   ": its manifest does not describe the model and its shapes match no "
                   "flavor of ",
                   searched.empty() ? "any registered family" : absl::StrJoin(searched, "; "),
                   " (custom shapes need a titan checkpoint that records them)"));
}

constexpr char kMetaHead[] = "output.weight";
constexpr char kMetaEmbedding[] = "tok_embeddings.weight";
constexpr char kHfHead[] = "lm_head.weight";
constexpr char kHfEmbedding[] = "model.embed_tokens.weight";

// Whether the checkpoint's `head` equals its `embedding` (dtype, shape, bits).
absl::StatusOr<bool> HeadCopiesEmbedding(const CheckpointReader& reader, const char* head,
                                         const char* embedding) {
  if (reader.Find(embedding) == nullptr) return false;
  TITAN_ASSIGN_OR_RETURN(const at::Tensor head_tensor, reader.Get(head));
  TITAN_ASSIGN_OR_RETURN(const at::Tensor embedding_tensor, reader.Get(embedding));
  return head_tensor.scalar_type() == embedding_tensor.scalar_type() &&
         head_tensor.sizes() == embedding_tensor.sizes() && head_tensor.equal(embedding_tensor);
}

// config.json ties the head, but the weights hold a head of their own: read untied, as
// transformers loads it (dropping that head would give another model).
absl::Status UntieDistinctHfHead(const CheckpointReader& reader, ModelInfo& info) {
  const TensorInfo* head = reader.Find(kHfHead);
  // A head alone is the tied weight itself (MatchParameters reads the embedding from it).
  if (!info.args.tie_word_embeddings || head == nullptr || reader.Find(kHfEmbedding) == nullptr) {
    return absl::OkStatus();
  }
  TITAN_ASSIGN_OR_RETURN(const bool copy, HeadCopiesEmbedding(reader, kHfHead, kHfEmbedding));
  if (copy) return absl::OkStatus();
  info.args.tie_word_embeddings = false;
  info.flavor = info.spec->MatchFlavor(info.args);
  // Once per file: a tool may read one folder's description several times (inspect, then diff).
  static std::mutex warned_mutex;
  static std::set<std::string>* const warned = new std::set<std::string>;
  const std::string file = absl::StrCat(reader.directory(), "/", head->file);
  std::lock_guard<std::mutex> lock(warned_mutex);
  if (warned->insert(file).second) {
    LOG(WARNING) << file << ": " << kHfHead << " differs from " << kHfEmbedding
                 << " though config.json says tie_word_embeddings true; the head is read untied, "
                 << "as transformers reads it";
  }
  return absl::OkStatus();
}

// The model an HF folder's config.json (`config`) describes, with the folder's
// generation_config.json; with its `weights`, a tied head they hold apart is read untied.
absl::StatusOr<ModelInfo> HfFolderModel(const json& config, const std::string& directory,
                                        const CheckpointReader* weights) {
  TITAN_ASSIGN_OR_RETURN(ModelInfo info, ModelInfoFromHfConfig(config, directory + "/config.json"));
  info.hf_generation_config = ReadHfGenerationConfig(directory);
  if (weights != nullptr) TITAN_RETURN_IF_ERROR(UntieDistinctHfHead(*weights, info));
  return info;
}

// Meta's params.json, read by the family's Meta adapter: the named family's, else the first
// registered family that has a Meta format (llama3).
absl::StatusOr<ModelInfo> DescribeMeta(const CheckpointReader& reader,
                                       const std::string& model_name) {
  const ModelSpec* spec = nullptr;
  for (const std::string& name : RegisteredModelNames()) {
    const ModelSpec* candidate = *FindModel(name);
    const bool chosen = model_name.empty() ? candidate->meta.has_value() : name == model_name;
    if (chosen && spec == nullptr) spec = candidate;
  }
  if (spec == nullptr || !spec->meta) {
    return absl::InvalidArgumentError(
        absl::StrCat(reader.directory(), ": a Meta checkpoint, and ",
                     model_name.empty() ? "no registered family" : model_name,
                     model_name.empty() ? " has a Meta format" : " has no Meta format"));
  }
  TITAN_ASSIGN_OR_RETURN(ModelInfo info, spec->meta->describe(*spec, reader.description(),
                                                              reader.directory() + "/params.json"));
  // params.json says nothing of tying. Meta's checkpoints hold output.weight even when the head is
  // tied (Llama 3.2 1B and 3B: a copy of the embedding), so a copy means tied and anything else
  // untied; without one, the flavor decides.
  if (reader.Find(kMetaHead) != nullptr) {
    TITAN_ASSIGN_OR_RETURN(info.args.tie_word_embeddings,
                           HeadCopiesEmbedding(reader, kMetaHead, kMetaEmbedding));
    if (info.args.tie_word_embeddings) {
      LOG(INFO) << reader.directory() << ": the head is read as tied because " << kMetaHead
                << " equals tok_embeddings.weight bitwise (Meta's format cannot tell a tied head "
                   "from an untied one with equal weights)";
    }
    info.flavor = spec->MatchFlavor(info.args);
  }
  return info;
}

// "a, b, c (41 more)".
std::string FirstFew(const std::vector<std::string>& items) {
  std::vector<std::string> listed(items.begin(),
                                  items.begin() + std::min(items.size(), kListedDifferences));
  std::string out = absl::StrJoin(listed, ", ");
  if (items.size() > listed.size())
    absl::StrAppend(&out, " (", items.size() - listed.size(), " more)");
  return out;
}

// The parameters `a` and `b` name or shape differently ("name [shape] vs [shape]", or absent).
std::vector<std::string> ParameterDifferences(const ModelInfo& a, const ModelInfo& b) {
  std::map<std::string, std::vector<int64_t>> only_b;
  for (auto& [name, shape] : ParameterShapes(*b.spec, b.args)) only_b[name] = shape;
  std::vector<std::string> differences;
  for (const auto& [name, shape] : ParameterShapes(*a.spec, a.args)) {
    const auto it = only_b.find(name);
    if (it == only_b.end()) {
      differences.push_back(absl::StrCat(name, " ", ShapeString(shape), " vs absent"));
      continue;
    }
    if (it->second != shape) {
      differences.push_back(
          absl::StrCat(name, " ", ShapeString(shape), " vs ", ShapeString(it->second)));
    }
    only_b.erase(it);
  }
  for (const auto& [name, shape] : only_b) {
    differences.push_back(absl::StrCat(name, " absent vs ", ShapeString(shape)));
  }
  return differences;
}

// OK unless `flavor` (convert_checkpoint's --flavor) is set and no family among `families` (every
// registered one when empty) has it: then the error lists the flavors they have, as an unknown
// --model lists the families; `why_family` says why those families.
absl::Status CheckFlavorKnown(const std::string& flavor, const std::vector<std::string>& families,
                              const std::string& why_family = "") {
  if (flavor.empty()) return absl::OkStatus();
  const std::vector<std::string> searched = families.empty() ? RegisteredModelNames() : families;
  const bool one = searched.size() == 1;
  std::vector<std::string> known;
  for (const std::string& name : searched) {
    const ModelSpec& spec = **FindModel(name);
    if (spec.Flavor(flavor).ok()) return absl::OkStatus();
    known.push_back(absl::StrCat(one ? "" : name + ": ", absl::StrJoin(spec.FlavorNames(), ", ")));
  }
  return absl::InvalidArgumentError(absl::StrCat("--flavor: unknown ", one ? searched[0] + " " : "",
                                                 "flavor \"", flavor, "\"", why_family,
                                                 "; expected one of ", absl::StrJoin(known, "; ")));
}

// `info`, read from `directory`, if it is the family and flavor asked for (empty: any).
absl::StatusOr<ModelInfo> CheckDescribed(ModelInfo info, const std::string& directory,
                                         const std::string& model_name, const std::string& flavor) {
  if (!model_name.empty() && info.name() != model_name) {
    return absl::InvalidArgumentError(absl::StrCat(directory, ": holds ", DescribeModelInfo(info),
                                                   ", not a ", model_name, " model"));
  }
  TITAN_RETURN_IF_ERROR(CheckFlavorKnown(
      flavor, {info.name()}, absl::StrCat(" (", directory, " holds a ", info.name(), " model)")));
  if (!flavor.empty() && info.flavor != flavor) {
    // The one-line descriptions may agree (rope_theta, norm_eps): name the fields that differ.
    const absl::StatusOr<TransformerArgs> wanted = info.spec->Flavor(flavor);
    const std::string differences =
        wanted.ok() ? ArchitectureDifferences(info.args, *wanted) : std::string();
    return absl::InvalidArgumentError(
        absl::StrCat(directory, ": holds ", DescribeModelInfo(info), ", not flavor ", flavor,
                     differences.empty() ? "" : " (", differences, differences.empty() ? "" : ")"));
  }
  return info;
}

// TransformerArgsToJson's fields, rope's flattened as rope_<key>, without the sizes
// SameArchitecture leaves aside.
json ArchitectureFields(const TransformerArgs& args) {
  json fields = TransformerArgsToJson(args);
  if (args.rope.scaling == RopeScalingType::kYarn) {
    // mscale and mscale_all_dim only give the attention factor: the factor used is compared.
    json& rope = fields.at("rope");
    rope["attention_factor"] = YarnAttentionFactor(args.rope);
    for (const char* key : {"mscale", "mscale_all_dim"}) rope.erase(key);
  }
  for (const auto& [key, value] : fields.at("rope").items()) fields["rope_" + key] = value;
  for (const char* key : {"rope", "vocab_size", "max_seq_len"}) fields.erase(key);
  return fields;
}

}  // namespace

std::string ArchitectureDifferences(const TransformerArgs& a, const TransformerArgs& b) {
  const json a_fields = ArchitectureFields(a), b_fields = ArchitectureFields(b);
  std::vector<std::string> differences;
  for (const auto& [key, value] : a_fields.items()) {
    // A field only one side has (a scaling's parameters) follows from rope_scaling differing.
    if (!b_fields.contains(key) || b_fields.at(key) == value) continue;
    differences.push_back(
        absl::StrCat(key, " ", JsonScalarText(value), " vs ", JsonScalarText(b_fields.at(key))));
  }
  return absl::StrJoin(differences, ", ");
}

std::string DescribeModelInfo(const ModelInfo& info) {
  return absl::StrCat(info.name(), info.flavor.empty() ? "" : " ", info.flavor, " (",
                      DescribeArchitecture(info.args), ")");
}

absl::StatusOr<ModelInfo> DescribeCheckpoint(const CheckpointReader& reader,
                                             const std::string& model_name,
                                             const std::string& flavor) {
  if (!model_name.empty()) {
    TITAN_RETURN_IF_ERROR(FindModel(model_name).status());
    TITAN_RETURN_IF_ERROR(CheckFlavorKnown(flavor, {model_name}));
  }
  absl::StatusOr<ModelInfo> info;
  const json& description = reader.description();
  switch (reader.format()) {
    case CheckpointFormat::kHf:
      info = HfFolderModel(description, reader.directory(), &reader);
      break;
    case CheckpointFormat::kTitan:
      if (description.contains("model")) {
        info = ModelInfoFromJson(description.at("model"),
                                 reader.directory() + "/manifest.json: state.model");
        break;
      }
      // The family comes from the shapes: a flavor no family has is refused before the search.
      TITAN_RETURN_IF_ERROR(CheckFlavorKnown(flavor, {}));
      info = InferFromTitanShapes(reader, model_name, flavor);
      break;
    case CheckpointFormat::kMeta:
      info = DescribeMeta(reader, model_name);
      break;
  }
  if (!info.ok()) return info.status();
  return CheckDescribed(*info, reader.directory(), model_name, flavor);
}

absl::StatusOr<ModelInfo> DescribeHfConfig(const std::string& directory,
                                           const std::string& model_name) {
  if (!model_name.empty()) TITAN_RETURN_IF_ERROR(FindModel(model_name).status());
  TITAN_ASSIGN_OR_RETURN(const json config, ReadHfConfig(directory));
  TITAN_ASSIGN_OR_RETURN(ModelInfo info, HfFolderModel(config, directory, /*weights=*/nullptr));
  // Only a tied head needs the weights read (to tell a head of its own from the tied copy).
  if (info.args.tie_word_embeddings && HfFolderHoldsWeights(directory)) {
    TITAN_ASSIGN_OR_RETURN(const std::unique_ptr<CheckpointReader> reader,
                           CheckpointReader::Open(directory, CheckpointFormat::kHf));
    TITAN_RETURN_IF_ERROR(UntieDistinctHfHead(*reader, info));
  }
  return CheckDescribed(std::move(info), directory, model_name, /*flavor=*/"");
}

absl::StatusOr<std::vector<ParameterSource>> MatchParameters(const CheckpointReader& reader,
                                                             const ModelInfo& info,
                                                             const ModelInfo* holds,
                                                             bool absent_allowed) {
  const bool hf = reader.format() == CheckpointFormat::kHf;
  // transformers drops the tied head on save (older writers kept a copy of the embedding); Meta's
  // checkpoints keep the copy (DescribeMeta calls it tied only then). A head that is no copy is a
  // parameter the tied model lacks.
  const char* tied_copy = hf                                           ? kHfHead
                          : reader.format() == CheckpointFormat::kMeta ? kMetaHead
                                                                       : nullptr;
  bool skip_head = false;
  if (info.args.tie_word_embeddings && tied_copy != nullptr && reader.Find(tied_copy) != nullptr) {
    TITAN_ASSIGN_OR_RETURN(
        skip_head, HeadCopiesEmbedding(reader, tied_copy, hf ? kHfEmbedding : kMetaEmbedding));
  }
  std::map<std::string, std::string> by_titan_name;  // titan name -> source name
  for (const TensorInfo& tensor : reader.tensors()) {
    if (skip_head && tensor.name == tied_copy) continue;
    // RoPE's inverse frequencies, which older transformers saved per layer and drops on load.
    if (hf && absl::EndsWith(tensor.name, ".rotary_emb.inv_freq")) continue;
    absl::StatusOr<std::string> titan_name =
        hf ? HfToTitanName(tensor.name) : absl::StatusOr<std::string>(tensor.name);
    by_titan_name[titan_name.ok() ? *titan_name : tensor.name] = tensor.name;
  }
  // A tied model saved as its head alone: transformers fills the embedding from it.
  if (hf && info.args.tie_word_embeddings && reader.Find(kHfEmbedding) == nullptr &&
      reader.Find(kHfHead) != nullptr) {
    const absl::StatusOr<std::string> embedding = HfToTitanName(kHfEmbedding);
    const absl::StatusOr<std::string> head = HfToTitanName(kHfHead);
    if (embedding.ok() && head.ok()) {
      by_titan_name.erase(*head);
      by_titan_name[*embedding] = kHfHead;
    }
  }
  // A Hugging Face file's tensors go by their names there, which the user can look up.
  const auto file_name = [hf](const std::string& titan_name) {
    if (!hf) return titan_name;
    absl::StatusOr<std::string> hf_name = TitanToHfName(titan_name);
    return hf_name.ok() ? *hf_name : titan_name;
  };
  // "name <checkpoint shape> vs <model shape>", in model order, then what the model lacks.
  std::vector<std::string> differences;
  std::vector<ParameterSource> params;
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    const auto it = by_titan_name.find(name);
    if (it == by_titan_name.end()) {
      if (!absent_allowed) {
        differences.push_back(absl::StrCat(file_name(name), " absent vs ", ShapeString(shape)));
      }
      continue;
    }
    const TensorInfo* tensor = reader.Find(it->second);
    if (tensor->shape != shape) {
      differences.push_back(
          absl::StrCat(tensor->name, " ", ShapeString(tensor->shape), " vs ", ShapeString(shape)));
    }
    params.push_back({name, it->second});
    by_titan_name.erase(it);
  }
  for (const auto& [titan_name, source_name] : by_titan_name) {
    differences.push_back(
        absl::StrCat(source_name, " ", ShapeString(reader.Find(source_name)->shape), " vs absent"));
  }
  if (differences.empty()) {
    for (const ParameterSource& param : params) {
      const TensorInfo* tensor = reader.Find(param.source_name);
      if (!at::isFloatingType(tensor->scalar_type)) {
        return absl::InvalidArgumentError(
            absl::StrCat(reader.directory(), ": ", tensor->file, ": tensor '", tensor->name,
                         "' is ", tensor->dtype, ", expected a floating-point weight"));
      }
    }
    return params;
  }
  const std::string headline =
      holds != nullptr ? absl::StrCat("checkpoint holds ", DescribeModelInfo(*holds),
                                      ", the model is ", DescribeModelInfo(info))
                       : absl::StrCat("checkpoint tensors do not match ", DescribeModelInfo(info));
  return absl::InvalidArgumentError(
      absl::StrCat(reader.directory(), ": ", headline, "; first differing tensors",
                   hf ? " (by their names in the files)" : "", ": ", FirstFew(differences)));
}

absl::Status CheckSameParameters(const ModelInfo& saved, const ModelInfo& model,
                                 const std::string& source) {
  const std::vector<std::string> differences = ParameterDifferences(saved, model);
  if (differences.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": checkpoint holds ", DescribeModelInfo(saved), ", the model is ",
                   DescribeModelInfo(model), "; first differing tensors: ", FirstFew(differences)));
}

}  // namespace titan
