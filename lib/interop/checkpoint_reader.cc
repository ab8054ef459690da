#include "lib/interop/checkpoint_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/checkpoint_step.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/meta_checkpoint.h"
#include "lib/interop/torch_state_dict.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/json_file.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kHfConfigFile[] = "config.json";
constexpr char kHfGenerationConfigFile[] = "generation_config.json";
constexpr char kHfSingleFile[] = "model.safetensors";
constexpr char kHfIndexFile[] = "model.safetensors.index.json";
// transformers' weights before safetensors (torch.save pickles): pytorch_model.bin, or shards
// pytorch_model-0000i-of-0000n.bin and their index.
constexpr char kHfPickleFile[] = "pytorch_model.bin";
constexpr char kHfPickleIndexFile[] = "pytorch_model.bin.index.json";
constexpr char kMetaParamsFile[] = "params.json";
constexpr char kMetaWeightsFile[] = "consolidated.00.pth";

// A way transformers stores an HF folder's weights: one file, or shards that an index lists.
struct HfWeightsLayout {
  const char* single_file;
  const char* index_file;
  const char* shard_prefix;  // Shards are <prefix>0000i-of-0000n<suffix>.
  const char* shard_suffix;
  bool pickled;  // torch.save archives rather than safetensors.
};

// In the order transformers' from_pretrained looks for them: safetensors first.
constexpr HfWeightsLayout kHfWeightsLayouts[] = {
    {kHfSingleFile, kHfIndexFile, "model-", ".safetensors", false},
    {kHfPickleFile, kHfPickleIndexFile, "pytorch_model-", ".bin", true},
};

// The layout of `directory`'s weights transformers reads; null when it holds none.
const HfWeightsLayout* FindHfWeights(const std::string& directory) {
  for (const HfWeightsLayout& layout : kHfWeightsLayouts) {
    if (PathExists(absl::StrCat(directory, "/", layout.single_file)) ||
        PathExists(absl::StrCat(directory, "/", layout.index_file))) {
      return &layout;
    }
  }
  return nullptr;
}

// A root without a committed step: NotFound naming what saves and restarts left there, OK when
// they left nothing.
absl::Status NoCommittedStep(const std::string& root) {
  const std::vector<std::string> folders = CheckpointManager(root, 0).UncommittedStepFolders();
  if (folders.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      root, ": no committed step, only ", absl::StrJoin(folders, ", "),
      " (.tmp*: a save that did not finish; .abandoned-*, .unfinished-*: steps a restart set "
      "aside, renamed back to step-N to be read)"));
}

// hf: tensors in one or more safetensors files, or torch.save archives (pytorch_model*.bin).
class HfReader : public CheckpointReader {
 public:
  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    if (const auto pickled = pickled_.find(name); pickled != pickled_.end()) {
      return pickled->second;
    }
    const auto it = location_.find(name);
    if (it == location_.end()) return NotFound(name);
    const SafetensorsFile& file = files_[it->second];
    absl::StatusOr<absl::string_view> bytes = file.Bytes(name);
    if (!bytes.ok()) return bytes.status();
    const SafetensorsEntry* entry = file.Find(name);
    return TensorOverBytes(*bytes, entry->scalar_type, entry->shape);
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    if (const auto pickled = pickled_.find(name); pickled != pickled_.end()) {
      // Contiguous: ReadTorchStateDictFile makes it so.
      const at::Tensor& tensor = pickled->second;
      return absl::string_view(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
    }
    const auto it = location_.find(name);
    if (it == location_.end()) return NotFound(name);
    return files_[it->second].Bytes(name);
  }

  std::vector<std::string> Verify() const override {
    std::vector<std::string> problems = damaged_;
    problems.insert(problems.end(), index_problems_.begin(), index_problems_.end());
    // A shard that could not be read holds tensors uncounted: the total would be a false problem.
    if (expected_total_size_ && damaged_files_.empty() && *expected_total_size_ != TotalBytes()) {
      problems.push_back(absl::StrCat(directory_, "/", index_file_, ": metadata.total_size ",
                                      *expected_total_size_, ", tensors hold ", TotalBytes()));
    }
    return problems;
  }
  std::vector<std::string> Damaged() const override { return damaged_; }

  // keep_problems: a shard that cannot be opened, and the index's disagreements with the shards,
  // are listed by Damaged() and Verify() rather than failing Open.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenHf(const std::string& path,
                                                                  bool keep_problems);

 private:
  absl::Status NotFound(absl::string_view name) const {
    return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
  }

  // As the index's writer counts: a tensor sharing an earlier one's storage (a tied head that
  // torch.save kept) not again.
  uint64_t TotalBytes() const {
    uint64_t total = 0;
    for (const TensorInfo& tensor : tensors_) {
      if (!shares_storage_.contains(tensor.name)) total += tensor.bytes;
    }
    return total;
  }

  bool Holds(const std::string& name) const {
    return location_.contains(name) || pickled_.contains(name);
  }

  // `problem` fails Open, unless problems are kept: then it joins `list` and Open goes on.
  absl::Status Found(absl::Status problem, std::vector<std::string>& list) {
    if (!keep_problems_) return problem;
    list.push_back(std::string(problem.message()));
    return absl::OkStatus();
  }

  // Lists `tensor` of the file at `path`; false when an earlier file has its name (a problem, the
  // first file keeping it).
  absl::StatusOr<bool> AddTensor(TensorInfo tensor, const std::string& path) {
    if (Holds(tensor.name)) {
      duplicated_.insert(tensor.name);
      TITAN_RETURN_IF_ERROR(
          Found(absl::DataLossError(absl::StrCat(path, ": tensor '", tensor.name,
                                                 "' also appears in ", Find(tensor.name)->file)),
                index_problems_));
      return false;
    }
    tensors_.push_back(std::move(tensor));
    return true;
  }

  // Opens `file_name` (relative to the directory), a torch.save archive where `pickled`, else
  // safetensors, appending its tensors.
  absl::Status AddFile(const std::string& file_name, bool pickled) {
    const std::string path = absl::StrCat(directory_, "/", file_name);
    if (pickled) {
      absl::StatusOr<NamedTensors> tensors = ReadTorchStateDictFile(path);
      if (!tensors.ok()) {
        damaged_files_.insert(file_name);
        return Found(tensors.status(), damaged_);
      }
      absl::flat_hash_set<const void*> storages;
      for (auto& [name, tensor] : *tensors) {
        TITAN_ASSIGN_OR_RETURN(
            const bool added,
            AddTensor({name, *SafetensorsDtypeName(tensor.scalar_type()), tensor.scalar_type(),
                       tensor.sizes().vec(), static_cast<uint64_t>(tensor.nbytes()), file_name},
                      path));
        if (!added) continue;
        if (!storages.insert(tensor.storage().unsafeGetStorageImpl()).second) {
          shares_storage_.insert(name);
        }
        pickled_[name] = std::move(tensor);
      }
      return absl::OkStatus();
    }
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      damaged_files_.insert(file_name);
      return Found(file.status(), damaged_);
    }
    for (const SafetensorsEntry& entry : file->entries()) {
      TITAN_ASSIGN_OR_RETURN(const bool added,
                             AddTensor({entry.name, entry.dtype, entry.scalar_type, entry.shape,
                                        entry.end - entry.begin, file_name},
                                       path));
      if (added) location_.emplace(entry.name, files_.size());
    }
    files_.push_back(*std::move(file));
    return absl::OkStatus();
  }

  // The index against the shards opened: each tensor where the index says, each indexed tensor
  // present (those of a shard that could not be opened are named by that shard's problem).
  absl::Status CheckIndex(const std::map<std::string, std::string>& weight_map,
                          const std::string& index_path) {
    for (const TensorInfo& tensor : tensors_) {
      if (duplicated_.contains(tensor.name)) continue;  // Named with both its files.
      const auto it = weight_map.find(tensor.name);
      if (it == weight_map.end() || it->second != tensor.file) {
        TITAN_RETURN_IF_ERROR(Found(
            absl::DataLossError(absl::StrCat(index_path, ": tensor '", tensor.name, "' is in ",
                                             tensor.file, ", the index says ",
                                             it == weight_map.end() ? "nothing" : it->second)),
            index_problems_));
      }
    }
    for (const auto& [name, file] : weight_map) {
      if (Holds(name) || damaged_files_.contains(file)) continue;
      TITAN_RETURN_IF_ERROR(Found(absl::DataLossError(absl::StrCat(index_path, ": tensor '", name,
                                                                   "' is missing from ", file)),
                                  index_problems_));
    }
    return absl::OkStatus();
  }

  std::vector<SafetensorsFile> files_;
  absl::flat_hash_map<std::string, size_t> location_;  // name -> index in files_
  // Tensors of torch.save archives, aliasing their read-only mappings.
  absl::flat_hash_map<std::string, at::Tensor> pickled_;
  absl::flat_hash_set<std::string> shares_storage_;  // Pickled, over an earlier one's storage.
  std::string index_file_;                           // The index read, when sharded.
  std::optional<uint64_t> expected_total_size_;      // hf's index
  bool keep_problems_ = false;
  std::vector<std::string> damaged_;                // Files that could not be opened.
  std::vector<std::string> index_problems_;         // Disagreements of the index and the files.
  absl::flat_hash_set<std::string> damaged_files_;  // Relative to the directory.
  absl::flat_hash_set<std::string> duplicated_;     // Tensors in more than one file.
};

// titan: a step directory read through lib/checkpoint, which joins the pieces ranks saved.
class TitanReader : public CheckpointReader {
 public:
  // `path` is a step directory, or a checkpoint root meaning its latest step.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& path,
                                                                bool verify_checksums,
                                                                bool inspect) {
    std::string step_dir = path;
    if (!PathExists(path)) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
    }
    if (!PathExists(absl::StrCat(path, "/", kCheckpointManifestFile))) {
      CheckpointManager manager(path, /*keep_latest_k=*/0);
      absl::StatusOr<int64_t> latest = manager.LatestStep();
      if (!latest.ok()) {
        TITAN_RETURN_IF_ERROR(NoCommittedStep(path));
        return absl::NotFoundError(absl::StrCat(path, ": not a titan checkpoint (no ",
                                                kCheckpointManifestFile,
                                                ", no step-N directories)"));
      }
      step_dir = manager.StepDirectory(*latest);
    }
    auto reader = std::unique_ptr<TitanReader>(new TitanReader());
    CheckpointStep::OpenOptions open_options;
    open_options.model_files_only = !inspect;
    open_options.keep_damaged_files = inspect;
    TITAN_ASSIGN_OR_RETURN(reader->step_reader_,
                           CheckpointStep::Open(step_dir, /*expected_step=*/-1, open_options));
    reader->format_ = CheckpointFormat::kTitan;
    reader->directory_ = step_dir;
    reader->verify_checksums_ = verify_checksums;
    reader->step_ = reader->step_reader_->step();
    reader->description_ = reader->step_reader_->state();
    for (const CheckpointStep::Tensor& tensor : reader->step_reader_->model()) {
      reader->by_name_[tensor.name] = &tensor;
      TensorInfo info{tensor.name, tensor.dtype, tensor.scalar_type, tensor.shape,
                      static_cast<uint64_t>(at::elementSize(tensor.scalar_type)) *
                          c10::multiply_integers(tensor.shape)};
      if (tensor.pieces.size() == 1) {
        info.file = tensor.pieces[0].file;
      } else {
        for (const CheckpointStep::Piece& piece : tensor.pieces) {
          info.piece_files.push_back(piece.file);
        }
      }
      reader->tensors_.push_back(std::move(info));
    }
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }

  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    TITAN_ASSIGN_OR_RETURN(const CheckpointStep::Tensor* tensor, Lookup(name));
    return step_reader_->Read(*tensor, verify_checksums_);
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    TITAN_ASSIGN_OR_RETURN(const CheckpointStep::Tensor* tensor, Lookup(name));
    return step_reader_->WholeBytes(*tensor);
  }

  std::vector<std::string> Verify() const override { return step_reader_->Verify(); }
  std::vector<std::string> Damaged() const override { return step_reader_->damaged(); }

 private:
  TitanReader() = default;

  absl::StatusOr<const CheckpointStep::Tensor*> Lookup(absl::string_view name) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
    }
    return it->second;
  }

  std::unique_ptr<CheckpointStep> step_reader_;
  bool verify_checksums_ = true;
  absl::flat_hash_map<std::string, const CheckpointStep::Tensor*> by_name_;
};

// Whether this process has not given `warning` yet: a run detects a folder's format more than once.
bool FirstTime(const std::string& warning) {
  static std::mutex mutex;
  static auto* given = new absl::flat_hash_set<std::string>();
  const std::lock_guard<std::mutex> lock(mutex);
  return given->insert(warning).second;
}

// <prefix>0000i-of-0000n<suffix> of `layout`, a shard that only its index maps tensors to.
bool IsShardFile(absl::string_view name, const HfWeightsLayout& layout) {
  return absl::ConsumePrefix(&name, layout.shard_prefix) &&
         absl::ConsumeSuffix(&name, layout.shard_suffix) && absl::StrContains(name, "-of-");
}

// Refuses an HF folder holding no weights transformers reads but shards without the index that
// maps tensors to them (transformers too refuses them) with what to do, rather than as a folder
// missing model.safetensors.
absl::Status RefuseUnindexedShards(const std::string& path) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(path);
  if (!names.ok()) return absl::OkStatus();  // Reading the weights names the problem.
  std::sort(names->begin(), names->end());   // The same file named whatever the listing's order.
  for (const HfWeightsLayout& layout : kHfWeightsLayouts) {
    std::vector<std::string> shards;
    for (const std::string& name : *names) {
      if (IsShardFile(name, layout)) shards.push_back(name);
    }
    if (shards.empty()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": holds ", layout.pickled ? "PyTorch .bin" : "safetensors", " shards (",
        absl::StrJoin(shards, ", "), ") but no ", layout.index_file,
        ", which maps each tensor to its shard (transformers too needs it): copy it from the ",
        "shards' source"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> HfReader::OpenHf(const std::string& path,
                                                                   bool keep_problems) {
  auto reader = std::unique_ptr<HfReader>(new HfReader());
  reader->format_ = CheckpointFormat::kHf;
  reader->directory_ = path;
  const HfWeightsLayout* layout = FindHfWeights(path);
  // A folder without weights is no damaged checkpoint: it is refused as before.
  reader->keep_problems_ = keep_problems && layout != nullptr;
  TITAN_ASSIGN_OR_RETURN(reader->description_, ReadHfConfig(path));
  if (layout == nullptr) {
    TITAN_RETURN_IF_ERROR(RefuseUnindexedShards(path));
    layout = &kHfWeightsLayouts[0];  // Its missing model.safetensors is the error.
  }
  const std::string index_path = absl::StrCat(path, "/", layout->index_file);
  const std::string single_path = absl::StrCat(path, "/", layout->single_file);
  // transformers' from_pretrained looks for the single file first.
  if (PathExists(single_path) || !PathExists(index_path)) {
    if (PathExists(index_path)) {
      LOG(WARNING) << path << ": reading " << layout->single_file << " as transformers does; "
                   << layout->index_file << " and its shards are ignored";
    }
    TITAN_RETURN_IF_ERROR(reader->AddFile(layout->single_file, layout->pickled));
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }
  reader->index_file_ = layout->index_file;
  TITAN_ASSIGN_OR_RETURN(std::string index_text, ReadFile(index_path));
  absl::StatusOr<HfIndex> index = ParseHfIndex(index_text, index_path);
  if (!index.ok()) {
    TITAN_RETURN_IF_ERROR(reader->Found(index.status(), reader->damaged_));
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }
  std::set<std::string> shards;
  for (const auto& [name, file] : index->weight_map) shards.insert(file);
  for (const std::string& shard : shards) {
    TITAN_RETURN_IF_ERROR(reader->AddFile(shard, layout->pickled));
  }
  TITAN_RETURN_IF_ERROR(reader->CheckIndex(index->weight_map, index_path));
  reader->expected_total_size_ = index->total_size;
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

}  // namespace

absl::StatusOr<json> ReadHfConfig(const std::string& directory) {
  return ReadJsonFile(absl::StrCat(directory, "/", kHfConfigFile));
}

json ReadHfGenerationConfig(const std::string& directory) {
  const std::string path = absl::StrCat(directory, "/", kHfGenerationConfigFile);
  if (!PathExists(path)) return nullptr;
  absl::StatusOr<json> config = ReadJsonFile(path);
  if (config.ok() && config->is_object()) return *std::move(config);
  LOG(WARNING) << (config.ok() ? path + ": not a JSON object" : config.status().message())
               << "; ignored, as transformers ignores it";
  return nullptr;
}

bool HfFolderHoldsWeights(const std::string& directory) {
  return FindHfWeights(directory) != nullptr;
}

absl::StatusOr<HfIndex> ParseHfIndex(absl::string_view text, const std::string& source) {
  TITAN_ASSIGN_OR_RETURN(const json index, ParseJsonText(text, source));
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) {
    return absl::DataLossError(source + ": expected an object with a \"weight_map\" object");
  }
  HfIndex parsed;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    if (!file.is_string() || file.get<std::string>().empty()) {
      return absl::DataLossError(
          absl::StrCat(source, ": weight_map[\"", name, "\"]: expected a file name"));
    }
    const std::string& path = file.get_ref<const std::string&>();
    // transformers joins the folder and the path as given: only an absolute path or a ".." leaves
    // it; "./sub//x" and "sub/x" are one shard.
    const std::optional<std::vector<std::string>> parts = PathParts(path);
    if (absl::StartsWith(path, "/") || !parts.has_value()) {
      return absl::DataLossError(
          absl::StrCat(source, ": weight_map[\"", name, "\"]: \"", path,
                       "\" is outside the checkpoint folder (expected a path inside it)"));
    }
    const std::string normal = absl::StrJoin(*parts, "/");
    if (normal.empty()) {
      return absl::DataLossError(
          absl::StrCat(source, ": weight_map[\"", name, "\"]: \"", path, "\" names no file"));
    }
    parsed.weight_map[name] = normal;
  }
  const auto metadata = index.find("metadata");
  if (metadata != index.end() && metadata->is_object()) {
    const auto total = metadata->find("total_size");
    if (total != metadata->end() && total->is_number_unsigned()) {
      parsed.total_size = total->get<uint64_t>();
    }
  }
  return parsed;
}

std::string CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kTitan:
      return "titan";
    case CheckpointFormat::kHf:
      return "hf";
    case CheckpointFormat::kMeta:
      return "meta";
  }
  return "unknown";
}

absl::StatusOr<CheckpointFormat> ParseCheckpointFormat(absl::string_view name) {
  for (CheckpointFormat format :
       {CheckpointFormat::kTitan, CheckpointFormat::kHf, CheckpointFormat::kMeta}) {
    if (name == CheckpointFormatName(format)) return format;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint format \"", name, "\", expected titan, hf or meta"));
}

absl::StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path,
                                                        absl::string_view read_other_hint,
                                                        bool hf_of_both) {
  if (!PathExists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  if (!IsDirectory(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": not a directory"));
  }
  if (PathExists(absl::StrCat(path, "/", kCheckpointManifestFile))) return CheckpointFormat::kTitan;
  if (PathExists(absl::StrCat(path, "/", kHfConfigFile))) {
    if (!PathExists(absl::StrCat(path, "/", kMetaParamsFile)) ||
        !PathExists(absl::StrCat(path, "/", kMetaWeightsFile))) {
      return CheckpointFormat::kHf;
    }
    const std::string hint =
        !read_other_hint.empty() ? std::string(read_other_hint)
        : hf_of_both ? absl::StrCat("to read the Meta one, move ", kMetaParamsFile, " and ",
                                    kMetaWeightsFile, " to a folder without ", kHfConfigFile)
                     : absl::StrCat("to read the Hugging Face one, move ", kHfConfigFile,
                                    " and its safetensors to a folder without ", kMetaParamsFile);
    const std::string warning =
        absl::StrCat(path, ": holds both a Hugging Face checkpoint (", kHfConfigFile,
                     ") and a Meta one (", kMetaParamsFile, ", ", kMetaWeightsFile,
                     "); reading the ", hf_of_both ? "Hugging Face" : "Meta", " one (", hint, ")");
    if (FirstTime(warning)) LOG(WARNING) << warning;
    return hf_of_both ? CheckpointFormat::kHf : CheckpointFormat::kMeta;
  }
  if (PathExists(absl::StrCat(path, "/", kMetaParamsFile))) return CheckpointFormat::kMeta;
  absl::StatusOr<std::vector<int64_t>> steps = CheckpointManager(path, 0).ListSteps();
  // A step's name on what is no step folder (a file `step-9`) is named, as titan_train names it.
  if (!steps.ok()) return steps.status();
  if (!steps->empty()) return CheckpointFormat::kTitan;
  TITAN_RETURN_IF_ERROR(NoCommittedStep(path));
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown checkpoint format (expected manifest.json or step-N/ for titan, ",
      "config.json for hf, params.json for meta)"));
}

const TensorInfo* CheckpointReader::Find(absl::string_view name) const {
  for (const TensorInfo& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const std::string& path, std::optional<CheckpointFormat> format, bool verify_checksums,
    bool inspect) {
  if (!format) {
    absl::StatusOr<CheckpointFormat> detected = DetectCheckpointFormat(path);
    if (!detected.ok()) return detected.status();
    format = *detected;
  }
  switch (*format) {
    case CheckpointFormat::kTitan:
      return TitanReader::Open(path, verify_checksums, inspect);
    case CheckpointFormat::kHf:
      return HfReader::OpenHf(path, /*keep_problems=*/inspect && !verify_checksums);
    case CheckpointFormat::kMeta:
      return OpenMetaCheckpoint(path, /*keep_damaged=*/inspect);
  }
  return absl::InvalidArgumentError("unknown checkpoint format");
}

}  // namespace titan
