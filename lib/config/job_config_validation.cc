// ValidateJobConfig and ValidateCheckpointConfig (declared in job_config.h): ranges, choices and
// the relations between keys, apart from the parsing in job_config.cc.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "lib/config/field_value.h"
#include "lib/config/job_config.h"

namespace titan {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;

// The data-parallel shard degree, with -1 resolved to the ranks the other degrees leave.
absl::StatusOr<int64_t> ShardDegree(const JobConfig::Parallelism& p, int world_size) {
  const int64_t others = int64_t{p.data_parallel_replicate_degree()} * p.tensor_parallel_degree() *
                         p.pipeline_parallel_degree() * p.context_parallel_degree();
  const std::string others_text = absl::StrFormat(
      "data_parallel_replicate_degree=%d × tensor_parallel_degree=%d × "
      "pipeline_parallel_degree=%d × context_parallel_degree=%d",
      p.data_parallel_replicate_degree(), p.tensor_parallel_degree(), p.pipeline_parallel_degree(),
      p.context_parallel_degree());
  if (p.data_parallel_shard_degree() == -1) {
    if (world_size % others != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("[parallelism] world size %d is not divisible by %s = %d, so "
                          "data_parallel_shard_degree=-1 cannot be inferred",
                          world_size, others_text, others));
    }
    return world_size / others;
  }
  const int64_t product = others * p.data_parallel_shard_degree();
  if (product != world_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[parallelism] %s × data_parallel_shard_degree=%d = %d, but the world size is %d",
        others_text, p.data_parallel_shard_degree(), product, world_size));
  }
  return p.data_parallel_shard_degree();
}

// Absolute, without "." and ".." parts or a trailing separator: two spellings of one folder agree.
std::filesystem::path NormalFolder(const std::string& folder) {
  std::error_code error;
  std::filesystem::path path = std::filesystem::absolute(folder, error);
  if (error) path = folder;
  path = path.lexically_normal();
  return path.has_filename() ? path : path.parent_path();
}

// A folder key that resolves to the dump folder itself would mix its files with the dump folder's
// own; `why` says what clashes.
absl::Status CheckOwnFolder(const JobConfig& config, absl::string_view key,
                            const std::string& folder, const std::string& default_folder,
                            absl::string_view why) {
  if (NormalFolder(UnderDumpFolder(config, folder)) != NormalFolder(config.job().dump_folder())) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(key, " = ", Quote(folder), " is [job] dump_folder itself: ", why,
                   "; use a subfolder, e.g. ", Quote(default_folder), " (the default)"));
}

// A folder a run writes into: `name` is its key and value, as messages say them.
struct OutputFolder {
  std::string name;
  std::filesystem::path path;  // NormalFolder's
  bool checkpoints;            // its step-N folders are read as checkpoints
  bool rank_entries;           // it holds an entry rank_<r> per rank
};

// The output folders of the features that are on; the flight recorder's always is.
std::vector<OutputFolder> OutputFolders(const JobConfig& config) {
  std::vector<OutputFolder> folders;
  const auto add = [&](absl::string_view key, const std::string& folder, bool checkpoints,
                       bool rank_entries = false) {
    folders.push_back({absl::StrCat(key, " = ", Quote(folder)),
                       NormalFolder(UnderDumpFolder(config, folder)), checkpoints, rank_entries});
  };
  if (config.checkpoint().enable()) {
    add("[checkpoint] folder", config.checkpoint().folder(), true);
    if (config.rl().algorithm() == "ppo") {
      add("PPO's critic checkpoints, [checkpoint] folder + \"_critic\"",
          CriticCheckpointFolder(config.checkpoint().folder()), true);
    }
  }
  if (config.metrics().enable_tensorboard()) {
    add("[metrics] save_tb_folder", config.metrics().save_tb_folder(), false,
        config.metrics().save_for_all_ranks());
  }
  const JobConfig::Profiling& profiling = config.profiling();
  if (profiling.enable_profiling()) {
    add("[profiling] save_traces_folder", profiling.save_traces_folder(), false);
  }
  if (profiling.enable_memory_snapshot()) {
    add("[profiling] save_memory_snapshot_folder", profiling.save_memory_snapshot_folder(), false);
  }
  add("[comm] save_traces_folder", config.comm().save_traces_folder(), false,
      /*rank_entries=*/true);
  return folders;
}

// `inner` lies below `outer`, both NormalFolder's (compared by part: "ck_tb" is not in "ck").
bool IsInside(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  const auto [in_outer, in_inner] =
      std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return in_outer == outer.end() && in_inner != inner.end();
}

// No output may share a checkpoint folder or lie in one, whose children the run reads as steps (a
// save could replace them, or a resume read them as damaged), and two outputs naming an entry per
// rank (rank_<r>) may not share a folder. Others may: their files' names differ.
absl::Status CheckOutputFoldersApart(const JobConfig& config) {
  const std::vector<OutputFolder> folders = OutputFolders(config);
  for (size_t i = 0; i < folders.size(); ++i) {
    for (size_t j = 0; j < folders.size(); ++j) {
      const OutputFolder& folder = folders[i];
      const OutputFolder& other = folders[j];
      // The critic's folder is the policy's name plus a suffix, never one of its steps.
      if (i == j || (folder.checkpoints && other.checkpoints)) continue;
      const bool clash =
          folder.checkpoints || other.checkpoints || (folder.rank_entries && other.rank_entries);
      if (j < i && clash && folder.path == other.path) {
        return absl::InvalidArgumentError(absl::StrCat(
            folder.name, " is the folder of ", other.name, " too; give each a folder of its own"));
      }
      if (other.checkpoints && IsInside(folder.path, other.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat(folder.name, " is inside ", other.name,
                         " (its step-N folders are read as checkpoints); use a folder outside it"));
      }
    }
  }
  return absl::OkStatus();
}

// A list of choices names a set: the default's members in another order (or repeated) are the
// default.
bool IsDefault(const Message& message, const Message& defaults, const FieldDescriptor* field) {
  if (!field->is_repeated() || field->type() != FieldDescriptor::TYPE_STRING ||
      field->options().GetRepeatedExtension(titan::choices).empty()) {
    return TomlValue(message, field) == TomlValue(defaults, field);
  }
  const auto members = [field](const Message& m) {
    const auto& items = m.GetReflection()->GetRepeatedPtrField<std::string>(m, field);
    return std::set<std::string>(items.begin(), items.end());
  };
  return members(message) == members(defaults);
}

bool IsPositiveInteger(const std::string& text) {
  int value;
  return absl::SimpleAtoi(text, &value) && value >= 1;
}

struct OffFeature {
  const char* section;
  const char* switch_off;  // how the feature is off, as the warning says it
  bool off;
  std::vector<const char*> keys;
  const char* keys_section = nullptr;  // the keys' own section, where it is not the switch's
};

// "[section] switch_off: key, key have no effect" for the keys `config` sets of a feature that is
// off; nullopt when it is on or none is set.
std::optional<std::string> WithoutEffectLine(const JobConfig& config, const OffFeature& feature) {
  if (!feature.off) return std::nullopt;
  std::vector<std::string> set;
  const char* keys_section =
      feature.keys_section != nullptr ? feature.keys_section : feature.section;
  for (const char* key : feature.keys) {
    if (!ChangedKey(config, keys_section, key)) continue;
    set.push_back(feature.keys_section != nullptr ? absl::StrCat("[", keys_section, "] ", key)
                                                  : std::string(key));
  }
  if (set.empty()) return std::nullopt;
  return absl::StrCat("[", feature.section, "] ", feature.switch_off, ": ",
                      absl::StrJoin(set, ", "),
                      set.size() == 1 ? " has no effect" : " have no effect");
}

// Why steps resumed_step + 1 .. [training] steps end no profiling cycle (cycles end at the
// multiples of profile_freq, where traces and snapshots are saved); "" when one ends there, or a
// resumed run has nothing left to train.
std::string UnreachedProfilingCycle(const JobConfig& config, int64_t resumed_step) {
  const int64_t freq = config.profiling().profile_freq();
  const int64_t steps = config.training().steps();
  if (freq < 1 || (resumed_step > 0 && resumed_step >= steps) ||
      steps / freq > resumed_step / freq) {
    return "";
  }
  const absl::string_view outcome = " (no cycle ends: no trace or snapshot is written)";
  if (resumed_step == 0) {
    return absl::StrCat("profile_freq = ", freq, " exceeds [training] steps = ", steps, outcome);
  }
  return absl::StrCat("profile_freq = ", freq, " has no multiple in steps ", resumed_step + 1,
                      " to ", steps, ", which this run trains after resuming step ", resumed_step,
                      outcome);
}

// The profiling switches, on with no cycle ending in the steps the run trains.
OffFeature UnreachedProfilingFeature(const std::string& unreached) {
  return {"profiling",
          unreached.c_str(),
          !unreached.empty(),
          {"enable_profiling", "enable_memory_snapshot"}};
}

}  // namespace

std::vector<std::string> KeysWithoutEffect(const JobConfig& config, int world_size) {
  const JobConfig::Profiling& profiling = config.profiling();
  const JobConfig::Parallelism& parallelism = config.parallelism();
  // As ParallelDims::fsdp_enabled; a layout that validation refuses warns nothing here.
  const absl::StatusOr<int64_t> shard_degree = ShardDegree(parallelism, world_size);
  const bool fsdp = !shard_degree.ok() || *shard_degree * parallelism.context_parallel_degree() > 1;
  // The first trace and memory snapshot are saved after step profile_freq.
  const std::string unreached_cycle = UnreachedProfilingCycle(config, /*resumed_step=*/0);
  const std::vector<OffFeature> features = {
      {"checkpoint",
       "enable = false",
       !config.checkpoint().enable(),
       {"folder", "interval", "last_save_model_only", "keep_latest_k"}},
      {"validation",
       "enable = false",
       !config.validation().enable(),
       {"dataset", "dataset_path", "local_batch_size", "seq_len", "freq", "steps"}},
      {"profiling",
       "enable_profiling = false",
       !profiling.enable_profiling(),
       {"save_traces_folder", "profiler_active", "profiler_warmup"}},
      {"profiling",
       "enable_memory_snapshot = false",
       !profiling.enable_memory_snapshot(),
       {"save_memory_snapshot_folder"}},
      {"profiling",
       "enable_profiling = false and enable_memory_snapshot = false",
       !profiling.enable_profiling() && !profiling.enable_memory_snapshot(),
       {"profile_freq"}},
      UnreachedProfilingFeature(unreached_cycle),
      {"lr_scheduler",
       "decay_ratio = 0 (no decay phase)",
       config.lr_scheduler().decay_ratio() == 0,
       {"decay_type", "min_lr_factor"}},
      {"activation_checkpoint",
       "mode is not \"selective\"",
       config.activation_checkpoint().mode() != "selective",
       {"selective_ac_option"}},
      {"metrics",
       "enable_tensorboard = false",
       !config.metrics().enable_tensorboard(),
       {"save_tb_folder"}},
      {"parallelism",
       "pipeline_parallel_degree = 1",
       parallelism.pipeline_parallel_degree() == 1,
       {"pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
        "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers"}},
      {"parallelism",
       "tensor_parallel_degree = 1",
       parallelism.tensor_parallel_degree() == 1,
       {"enable_sequence_parallel", "disable_loss_parallel"}},
      {"parallelism",
       "context_parallel_degree = 1",
       parallelism.context_parallel_degree() == 1,
       {"context_parallel_rotate_method", "context_parallel_load_balancer"}},
      {"parallelism",
       "data_parallel_shard_degree × context_parallel_degree = 1 (no FSDP)",
       !fsdp,
       {"fsdp_reshard_after_forward"}},
      {"parallelism",
       "data_parallel_shard_degree × context_parallel_degree = 1 (no FSDP)",
       !fsdp,
       {"gather_for_generation"},
       "rl"},
  };
  std::vector<std::string> lines;
  for (const OffFeature& feature : features) {
    if (std::optional<std::string> line = WithoutEffectLine(config, feature)) {
      lines.push_back(*std::move(line));
    }
  }
  return lines;
}

std::optional<std::string> ProfilingWithoutEffectAfterResume(const JobConfig& config,
                                                             int64_t resumed_step) {
  // From step 1 no cycle ends either: KeysWithoutEffect said so at startup.
  if (resumed_step <= 0 || !UnreachedProfilingCycle(config, 0).empty()) return std::nullopt;
  const std::string unreached = UnreachedProfilingCycle(config, resumed_step);
  return WithoutEffectLine(config, UnreachedProfilingFeature(unreached));
}

absl::Status ValidateCheckpointConfig(const JobConfig& config) {
  const JobConfig defaults = DefaultJobConfig();
  if (absl::Status status =
          CheckOwnFolder(config, "[checkpoint] folder", config.checkpoint().folder(),
                         defaults.checkpoint().folder(),
                         "checkpoints need a folder of their own (its lock, its step-N folders)");
      !status.ok()) {
    return status;
  }
  const JobConfig::Checkpoint& checkpoint = config.checkpoint();
  if (checkpoint.keep_latest_k() == 1) {
    return WithKeySource(absl::InvalidArgumentError(
        "[checkpoint] keep_latest_k=1: expected 0 (keep all) or >= 2 (the newest checkpoint may "
        "still be being written)"));
  }
  if (checkpoint.initial_load_in_hf() && !checkpoint.initial_load_model_only()) {
    return absl::InvalidArgumentError(
        "[checkpoint] initial_load_in_hf=true needs initial_load_model_only=true (safetensors "
        "hold only model weights)");
  }
  if (checkpoint.initial_load_in_hf() && checkpoint.initial_load_path().empty() &&
      config.model().hf_assets_path().empty()) {
    return absl::InvalidArgumentError(
        "[checkpoint] initial_load_in_hf = true: no weights to load; set [checkpoint] "
        "initial_load_path (a Hugging Face folder) or [model] hf_assets_path");
  }
  if (!checkpoint.initial_load_model_only() && checkpoint.initial_load_path().empty()) {
    return absl::InvalidArgumentError(
        "[checkpoint] initial_load_model_only = false applies to [checkpoint] initial_load_path, "
        "which is empty: set it, or drop the key");
  }
  // Refused here, not where the load happens: a resume, which reads no initial load, would
  // otherwise accept it.
  if (!checkpoint.initial_load_model_only()) {
    return absl::UnimplementedError(
        "[checkpoint] initial_load_model_only=false: initial loads take model weights only; "
        "resume a full run through [checkpoint] folder instead");
  }
  if (checkpoint.last_save_in_hf() && !checkpoint.last_save_model_only()) {
    return absl::InvalidArgumentError(
        "[checkpoint] last_save_in_hf=true needs last_save_model_only=true (safetensors hold "
        "only model weights)");
  }

  // Keys of a feature that is off would be ignored: refused, as [float8]'s are.
  if (!checkpoint.enable()) {
    if (checkpoint.load_step() != -1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[checkpoint] load_step = ", checkpoint.load_step(),
          " applies to [checkpoint] enable = true (resuming), which is false: set it, or drop "
          "the key"));
    }
    if (checkpoint.exclude_from_loading_size() > 0) {
      return absl::InvalidArgumentError(
          "[checkpoint] exclude_from_loading applies to [checkpoint] enable = true (resuming), "
          "which is false: set it, or drop the key");
    }
    for (const char* key : {"enable_first_step_checkpoint", "async_mode", "last_save_in_hf"}) {
      if (const std::optional<std::string> set = ChangedKey(config, "checkpoint", key)) {
        return absl::InvalidArgumentError(
            absl::StrCat(*set,
                         " applies to [checkpoint] enable = true (saving), which is false: set "
                         "it, or drop the key"));
      }
    }
  }
  if (checkpoint.export_dtype() != defaults.checkpoint().export_dtype() &&
      (!checkpoint.enable() || !checkpoint.last_save_model_only())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[checkpoint] export_dtype = ", Quote(checkpoint.export_dtype()),
        " applies to the model-only final save (enable = true and last_save_model_only = true), ",
        checkpoint.enable() ? "but last_save_model_only is false (the final save keeps float32 "
                              "for resuming)"
                            : "but enable is false",
        ": change that, or drop the key"));
  }
  return absl::OkStatus();
}

absl::Status ValidateJobConfig(const JobConfig& config, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be >= 1, got ", world_size));
  }
  const Descriptor* root = JobConfig::descriptor();
  const JobConfig defaults = DefaultJobConfig();
  // Checked last, so a job that is also inconsistent hears about that first.
  absl::Status unsupported_key;
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    const Message& message = config.GetReflection()->GetMessage(config, section);
    const Message& section_defaults = defaults.GetReflection()->GetMessage(defaults, section);
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      if (absl::Status status =
              CheckField(absl::StrCat("[", section->name(), "] "), message, field);
          !status.ok()) {
        return WithKeySource(status);
      }
      const std::string& unsupported = field->options().GetExtension(titan::unsupported);
      const std::string value = TomlValue(message, field);
      if (!unsupported.empty() && unsupported_key.ok() &&
          !IsDefault(message, section_defaults, field)) {
        unsupported_key = absl::UnimplementedError(absl::StrCat(
            "[", section->name(), "] ", field->name(), " = ", value, ": ", unsupported));
      }
    }
  }

  if (config.job().dump_folder().empty()) {
    return WithKeySource(absl::InvalidArgumentError(
        "[job] dump_folder: expected a folder for the job's outputs, got \"\""));
  }

  // A torchtitan job file's dataset = "c4" streamed c4 from the Hub; titan reads local files only,
  // and a path left unset is the bundled toy corpus.
  for (const auto& [section, used, name, path_set, path] :
       {std::tuple{"training", true, config.training().dataset(),
                   config.training().has_dataset_path(), config.training().dataset_path()},
        std::tuple{"validation", config.validation().enable(), config.validation().dataset(),
                   config.validation().has_dataset_path(), config.validation().dataset_path()}}) {
    if (!used) continue;
    if (path_set && path.empty()) {
      return WithKeySource(absl::InvalidArgumentError(absl::StrCat(
          "[", section,
          "] dataset_path: expected a JSON lines file or a folder of them, got \"\"")));
    }
    if (!name.empty() && name != "default" && !path_set) {
      const absl::string_view use = absl::string_view(section) == "training" ? "train" : "validate";
      return absl::InvalidArgumentError(absl::StrCat(
          "[", section, "] dataset = \"", name, "\" without a dataset_path would ", use,
          " on the bundled toy corpus (", path, "): titan reads local files only; set [", section,
          "] dataset_path to your copy of ", name, ", or dataset = \"default\""));
    }
  }

  if (absl::Status status = ValidateCheckpointConfig(config); !status.ok()) return status;
  if (absl::Status status = CheckOwnFolder(
          config, "[comm] save_traces_folder", config.comm().save_traces_folder(),
          defaults.comm().save_traces_folder(),
          "the flight-recorder dumps (rank_<r> files) need a folder of their own ([metrics] "
          "save_for_all_ranks writes rank_<r> folders there)");
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckOutputFoldersApart(config); !status.ok()) return status;

  const JobConfig::Parallelism& parallelism = config.parallelism();
  absl::StatusOr<int64_t> shard_degree = ShardDegree(parallelism, world_size);
  if (!shard_degree.ok()) return shard_degree.status();
  const int64_t ep = parallelism.expert_parallel_degree();
  // Without a mixture-of-experts family no layout helps: that reason comes before the arithmetic.
  const std::string& ep_unsupported = JobConfig::Parallelism::descriptor()
                                          ->FindFieldByName("expert_parallel_degree")
                                          ->options()
                                          .GetExtension(titan::unsupported);
  if (ep > 1 && !ep_unsupported.empty()) {
    return WithKeySource(absl::UnimplementedError(
        absl::StrCat("[parallelism] expert_parallel_degree = ", ep, ": ", ep_unsupported)));
  }
  const int64_t ep_pool =
      *shard_degree * parallelism.context_parallel_degree() * parallelism.tensor_parallel_degree();
  const int64_t ep_base =
      int64_t{parallelism.context_parallel_degree()} * parallelism.tensor_parallel_degree();
  if (ep > 1 && (ep_pool % ep != 0 || ep % ep_base != 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[parallelism] expert_parallel_degree=%d must divide data_parallel_shard × "
                        "context_parallel × tensor_parallel degrees = %d and be a multiple of "
                        "context_parallel × tensor_parallel = %d",
                        ep, ep_pool, ep_base));
  }

  const JobConfig::Training& training = config.training();
  if (training.dataset_text_field().empty()) {
    return WithKeySource(absl::InvalidArgumentError(
        "[training] dataset_text_field: expected the JSON field holding each document's text, "
        "got \"\""));
  }
  const int64_t dp_degree = *shard_degree * parallelism.data_parallel_replicate_degree();
  if (training.global_batch_size() != -1 &&
      training.global_batch_size() % (training.local_batch_size() * dp_degree) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[training] global_batch_size=%d is not a multiple of local_batch_size=%d × "
        "data-parallel degree=%d",
        training.global_batch_size(), training.local_batch_size(), dp_degree));
  }
  if (parallelism.pipeline_parallel_degree() > 1 &&
      training.local_batch_size() % parallelism.pipeline_parallel_microbatch_size() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[parallelism] pipeline_parallel_microbatch_size=%d does not divide "
        "[training] local_batch_size=%d",
        parallelism.pipeline_parallel_microbatch_size(), training.local_batch_size()));
  }

  // Context parallelism cuts every sequence into equal chunks, sequence parallelism each rank's
  // share again.
  const int64_t cp = parallelism.context_parallel_degree();
  const int64_t tp = parallelism.tensor_parallel_degree();
  const bool head_tail = parallelism.context_parallel_load_balancer() == "headtail";
  for (const auto& [key, seq_len] :
       {std::pair<const char*, int64_t>{"[training] seq_len", training.seq_len()},
        {"[validation] seq_len",
         config.validation().enable() ? config.validation().seq_len() : 0}}) {
    if (cp > 1 && seq_len % (head_tail ? 2 * cp : cp) != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s=%d is not divisible by %s[parallelism] context_parallel_degree=%d%s", key, seq_len,
          head_tail ? "2 × " : "", cp,
          head_tail ? " (context_parallel_load_balancer=headtail cuts each sequence into 2 × "
                      "degree chunks)"
                    : ""));
    }
    if (tp > 1 && parallelism.enable_sequence_parallel() && (seq_len / cp) % tp != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s=%d%s is not divisible by [parallelism] tensor_parallel_degree=%d "
          "(enable_sequence_parallel splits each rank's tokens; set it to false or change "
          "seq_len)",
          key, seq_len,
          cp > 1 ? absl::StrFormat(" / [parallelism] context_parallel_degree=%d", cp) : "", tp));
    }
  }

  if (training.loss_chunk_size() > 0 && tp > 1 && parallelism.disable_loss_parallel()) {
    return absl::InvalidArgumentError(
        "[training] loss_chunk_size with [parallelism] disable_loss_parallel = true: the fused "
        "loss never builds logits to gather (it runs on the head's vocabulary shards); drop one");
  }
  if (training.loss_chunk_size() > 0 && config.debug().batch_invariant()) {
    return absl::InvalidArgumentError(
        "[training] loss_chunk_size with [debug] batch_invariant = true: the fused head's chunked "
        "matmuls are not batch-invariant; set loss_chunk_size = 0");
  }

  if (parallelism.pipeline_parallel_degree() == 1) {
    if (parallelism.pipeline_parallel_split_points_size() > 0) {
      return absl::InvalidArgumentError(
          "[parallelism] pipeline_parallel_split_points applies to pipeline_parallel_degree > 1, "
          "which is 1: raise it, or drop the key");
    }
    if (!parallelism.pipeline_parallel_schedule_csv().empty()) {
      return absl::InvalidArgumentError(
          "[parallelism] pipeline_parallel_schedule_csv applies to pipeline_parallel_degree > 1, "
          "which is 1: raise it, or drop the key");
    }
  }
  // Split points fix every stage's layers: the keys that size stages would be ignored.
  if (parallelism.pipeline_parallel_split_points_size() > 0) {
    for (const char* key :
         {"pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
          "pipeline_parallel_last_stage_less_layers"}) {
      if (ChangedKey(config, "parallelism", key)) {
        return WithKeySource(absl::InvalidArgumentError(absl::StrCat(
            "[parallelism] pipeline_parallel_split_points and ", key, " both set; set one")));
      }
    }
  }

  const JobConfig::Profiling& profiling = config.profiling();
  if (profiling.enable_profiling() &&
      // In int64: a huge warmup must not wrap the sum negative and pass.
      int64_t{profiling.profiler_warmup()} + profiling.profiler_active() >
          profiling.profile_freq()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[profiling] profiler_warmup=%d + profiler_active=%d exceeds profile_freq=%d: a cycle "
        "must fit its warmup and traced steps",
        profiling.profiler_warmup(), profiling.profiler_active(), profiling.profile_freq()));
  }

  bool float8 = false;
  for (const std::string& converter : config.model().converters()) {
    if (converter != "float8") {
      return WithKeySource(absl::InvalidArgumentError(absl::StrCat(
          "[model] converters: unknown converter ", Quote(converter), "; expected \"float8\"")));
    }
    // Each converter runs once, however often it is listed.
    if (float8) {
      return WithKeySource(absl::InvalidArgumentError(
          absl::StrCat("[model] converters: ", Quote(converter), " is listed twice")));
    }
    float8 = true;
  }
  const Descriptor* float8_section = JobConfig::Float8::descriptor();
  for (int i = 0; i < float8_section->field_count() && !float8; ++i) {
    const FieldDescriptor* field = float8_section->field(i);
    const bool refused_anyway = !field->options().GetExtension(titan::unsupported).empty();
    if (!refused_anyway &&
        TomlValue(config.float8(), field) != TomlValue(defaults.float8(), field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("[float8] ", field->name(),
                       " is set but [model] converters does not include "
                       "\"float8\": add it, or drop the key"));
    }
  }
  if (config.float8().enable_fsdp_float8_all_gather() && !config.float8().recipe_name().empty() &&
      config.float8().recipe_name() != "tensorwise") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[float8] enable_fsdp_float8_all_gather = true needs recipe_name = \"tensorwise\" (one "
        "scale per weight, as torchao), got ",
        Quote(config.float8().recipe_name())));
  }
  if (config.float8().enable_fsdp_float8_all_gather() &&
      *shard_degree * parallelism.context_parallel_degree() <= 1) {
    return absl::InvalidArgumentError(
        "[float8] enable_fsdp_float8_all_gather = true needs FSDP: [parallelism] "
        "data_parallel_shard_degree (or context_parallel_degree) above 1");
  }
  if (config.float8().precompute_float8_dynamic_scale_for_fsdp() &&
      !config.float8().enable_fsdp_float8_all_gather()) {
    return absl::InvalidArgumentError(
        "[float8] precompute_float8_dynamic_scale_for_fsdp = true needs "
        "enable_fsdp_float8_all_gather = true (the scales are those of the float8 all-gather)");
  }

  const std::string& ac_option = config.activation_checkpoint().selective_ac_option();
  if (ac_option != "op" && !IsPositiveInteger(ac_option)) {
    return WithKeySource(absl::InvalidArgumentError(
        absl::StrCat("[activation_checkpoint] selective_ac_option=", Quote(ac_option),
                     ": expected a positive integer N (every Nth layer) or \"op\"")));
  }

  return WithKeySource(unsupported_key);
}

}  // namespace titan
