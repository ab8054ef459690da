#ifndef TITAN_LIB_CONFIG_JOB_CONFIG_H_
#define TITAN_LIB_CONFIG_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/job_config.pb.h"

namespace titan {

// The schema's defaults, list defaults included (proto2 cannot declare those, so a bare JobConfig()
// lacks them).
JobConfig DefaultJobConfig();

// Reads the job from a command line: every argument after argv[0] is an override (see
// ParseJobConfig); --job.config_file names the TOML file. Does not validate.
absl::StatusOr<JobConfig> LoadJobConfig(int argc, char** argv);

// Refuses `args` (a tool's job arguments) when they set no key, --nproc_per_node apart: the job
// would be the built-in 10,000-step default, trained into ./outputs.
absl::Status CheckJobGiven(const std::vector<std::string>& args);

// Defaults, then the TOML file (`toml_path`, or --job.config_file among the overrides; empty:
// none), then the overrides in order: "--section.key=value", "--section.key value", or a bare
// "--section.key" for a boolean (true). Lists are TOML arrays in files; on the command line lists
// of strings are comma-separated and other lists (of floats, of tables) are TOML inline values,
// e.g. --optimizer.param_groups='[{pattern = "norm", weight_decay = 0.0}]'. Old key names listed
// as aliases in the schema are accepted; setting an old name and its new name in the same file (or
// on the same command line) is an error. Does not validate.
//
// `unread`: a section the parsing tool does not read (titan_rl's [rl] for titan_train); a key of it
// the schema lacks is refused as that section's, with no "did you mean" of a key the tool would
// refuse, and so is a key of it set to other than its default, naming where it was set. The
// section at its defaults passes: a run's config.toml holds every section.
struct UnreadSection {
  std::string section;  // "rl"
  std::string reader;   // The tool that reads it: "titan_rl".
  std::string tool;     // The parsing tool: "titan_train".
};
absl::StatusOr<JobConfig> ParseJobConfig(const std::string& toml_path,
                                         const std::vector<std::string>& overrides,
                                         const std::optional<UnreadSection>& unread = std::nullopt);

// As ParseJobConfig with the TOML text given directly; `source_name` names it in errors. Here a
// --job.config_file override only sets that key: no file is read.
absl::StatusOr<JobConfig> ParseJobConfigText(absl::string_view toml_text,
                                             absl::string_view source_name,
                                             const std::vector<std::string>& overrides);

// Every key as --section.key with its type, default, help, choices and old names.
std::string JobConfigHelp();

// The effective configuration as TOML; ParseJobConfigText reads it back to an equal config but for
// [job] config_file, written as a comment (a job file cannot set it).
std::string JobConfigToToml(const JobConfig& config);
// JobConfigToToml for a log ([job] print_config): secrets (a scorer's "API_KEY=... cmd", a URL's
// credentials) masked by RedactSecretsIn; config.toml keeps them, to run again.
std::string JobConfigToPrintedToml(const JobConfig& config);

// The keys of [`section`] whose values differ from the schema's defaults, as TOML lines
// ("[rl] algorithm = \"ppo\""), in schema order; a key set to its default is not listed.
std::vector<std::string> ChangedKeys(const JobConfig& config, absl::string_view section);
// [`section`] `key` as ChangedKeys lists it when it differs from its default; nullopt otherwise.
std::optional<std::string> ChangedKey(const JobConfig& config, absl::string_view section,
                                      absl::string_view key);

// Where the last ParseJobConfig (or ParseJobConfigText) in this process set [`section`] `key`:
// "x.toml:12" or the flag ("--section.key", or an old name's); nullopt when nothing set it.
std::optional<std::string> KeySource(absl::string_view section, absl::string_view key);

// The keys whose values differ between `earlier_toml` (a JobConfigToToml text, such as the
// config.toml of a run before) and `config`, as "[section] key = old -> new" in schema order; a key
// that only one side has (another titan's schema) is left out; secrets are masked
// (RedactSecretsIn).
std::vector<std::string> KeysChangedSince(absl::string_view earlier_toml, const JobConfig& config);

// Where a folder key (checkpoint.folder, metrics.save_tb_folder, ...) points, as torchtitan's
// os.path.join(job.dump_folder, folder): an absolute `folder` as is, else under the dump folder.
std::string UnderDumpFolder(const JobConfig& config, const std::string& folder);

// Where titan_rl's PPO saves its value head: beside the policy's checkpoint folder `folder`, its
// name plus "_critic" ("checkpoint/" -> "checkpoint_critic", not a folder inside the policy's).
std::string CriticCheckpointFolder(absl::string_view folder);

// Where the last ParseJobConfig (or ParseJobConfigText) in this process set `status`'s key, put
// before its message: a refusal that starts "[section] key" (as checks anywhere in titan word them)
// becomes "file.toml:12: [section] key ..." or "--section.key: [section] key ...". `status` is
// returned as is when it is OK, names no key first, or that key was left at its default.
absl::Status WithKeySource(const absl::Status& status);

// Checks ranges, choices and the relations between keys for a job on `world_size` ranks
// (data_parallel_shard_degree = -1 takes the ranks the other degrees leave).
absl::Status ValidateJobConfig(const JobConfig& config, int world_size = 1);

// ValidateJobConfig's checks of [checkpoint] (keep_latest_k = 1, keys of a feature that is off,
// its folder being the dump folder, ...). profile_run, which replaces [checkpoint] before
// ValidateJobConfig sees it, refuses a job's invalid values with it as titan_train does.
absl::Status ValidateCheckpointConfig(const JobConfig& config);

// The keys set to non-default values under a feature that is off, which therefore do nothing: one
// line per feature, e.g. "[checkpoint] enable = false: interval, keep_latest_k have no effect";
// also a feature that is on but never acts ([profiling] enable_profiling with a profile_freq past
// [training] steps) and the decay keys of a schedule without decay ([lr_scheduler] decay_ratio =
// 0). Accepted, not refused: torchtitan's job files set them with the feature off, and a flag such
// as
// --checkpoint.enable=false turns a file's feature off. `world_size` resolves
// data_parallel_shard_degree = -1, which decides whether FSDP runs.
std::vector<std::string> KeysWithoutEffect(const JobConfig& config, int world_size = 1);

// KeysWithoutEffect's line for [profiling] enable_profiling / enable_memory_snapshot, for a run
// that resumed step `resumed_step` and so trains only the steps after it: "[profiling]
// profile_freq = 10 has no multiple in steps 11 to 15, ...: enable_profiling has no effect".
// KeysWithoutEffect judges from step 1, before the step to resume is known. nullopt when a cycle
// ends in those steps, neither key is set, nothing is left to train, resumed_step <= 0, or
// KeysWithoutEffect said it already (profile_freq past [training] steps).
std::optional<std::string> ProfilingWithoutEffectAfterResume(const JobConfig& config,
                                                             int64_t resumed_step);

}  // namespace titan

#endif  // TITAN_LIB_CONFIG_JOB_CONFIG_H_
