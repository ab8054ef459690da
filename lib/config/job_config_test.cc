#include "lib/config/job_config.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

absl::StatusOr<JobConfig> ParseText(const std::string& toml,
                                    const std::vector<std::string>& overrides = {}) {
  return ParseJobConfigText(toml, "configs/x.toml", overrides);
}

std::string ParseError(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> config = ParseText(toml, overrides);
  EXPECT_FALSE(config.ok()) << "parsed without error: " << toml;
  return config.ok() ? "" : std::string(config.status().message());
}

std::string ValidationError(const std::vector<std::string>& overrides, int world_size = 1) {
  absl::StatusOr<JobConfig> config = ParseText("", overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return "";
  const absl::Status status = ValidateJobConfig(*config, world_size);
  EXPECT_FALSE(status.ok()) << "valid at world size " << world_size;
  return std::string(status.message());
}

void ExpectValid(const std::vector<std::string>& overrides, int world_size = 1) {
  absl::StatusOr<JobConfig> config = ParseText("", overrides);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(ValidateJobConfig(*config, world_size).ok())
      << ValidateJobConfig(*config, world_size);
}

// What a key the optimizer hands to ATen in float32 must be, in its errors and --help.
const std::string kFloat32Range =
    "a finite value representable as float32 (magnitude <= 3.4028234663852886e+38)";

TEST(JobConfigTest, DefaultsFollowTorchtitan) {
  const JobConfig config = DefaultJobConfig();
  EXPECT_EQ(config.job().dump_folder(), "./outputs");
  EXPECT_EQ(config.metrics().log_freq(), 10);
  EXPECT_EQ(config.model().flavor(), "debugmodel");
  EXPECT_EQ(config.model().tokenizer_path(), "");  // hf_assets_path, else the bundled one
  EXPECT_DOUBLE_EQ(config.optimizer().lr(), 8e-4);
  EXPECT_DOUBLE_EQ(config.optimizer().beta2(), 0.95);
  EXPECT_DOUBLE_EQ(config.lr_scheduler().decay_ratio(), -1);
  EXPECT_EQ(config.training().global_batch_size(), -1);
  EXPECT_EQ(config.training().seq_len(), 2048);
  EXPECT_EQ(config.training().seed(), -1);
  EXPECT_EQ(config.parallelism().data_parallel_shard_degree(), -1);
  EXPECT_EQ(config.parallelism().pipeline_parallel_schedule(), "1F1B");
  EXPECT_TRUE(config.checkpoint().initial_load_model_only());
  EXPECT_EQ(config.activation_checkpoint().selective_ac_option(), "2");
  EXPECT_EQ(config.validation().dataset_path(), "assets/default_corpus/validation.jsonl");
  ASSERT_EQ(config.compile().components_size(), 2);
  EXPECT_EQ(config.compile().components(0), "model");
  EXPECT_EQ(config.compile().components(1), "loss");
  EXPECT_TRUE(ValidateJobConfig(config).ok()) << ValidateJobConfig(config);

  absl::StatusOr<JobConfig> parsed = ParseJobConfig("", {});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*parsed, config));
}

TEST(JobConfigTest, EverySchemaFieldHasHelp) {
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    EXPECT_FALSE(section->options().GetExtension(titan::help).empty()) << section->name();
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      EXPECT_FALSE(field->options().GetExtension(titan::help).empty()) << field->full_name();
      if (field->message_type() == nullptr) continue;
      for (int k = 0; k < field->message_type()->field_count(); ++k) {
        const FieldDescriptor* key = field->message_type()->field(k);
        EXPECT_FALSE(key->options().GetExtension(titan::help).empty()) << key->full_name();
      }
    }
  }
}

TEST(JobConfigTest, CommandLineOverridesFile) {
  const std::string path = TempDir() + "/override.toml";
  ASSERT_TRUE(WriteFileAtomically(path,
                                  "[training]\nsteps = 100\nseq_len = 256\n"
                                  "[optimizer]\nlr = 1e-3\n"
                                  "[model]\nconverters = [\"float8\"]\n")
                  .ok());
  absl::StatusOr<JobConfig> config =
      ParseJobConfig(path, {"--training.steps=200", "--optimizer.lr", "5e-4", "--checkpoint.enable",
                            "--metrics.enable_tensorboard", "false", "--training.seed", "-1",
                            "--model.converters= float8 , fp8_rowwise ",
                            "--compile.components=", "--training.steps=300"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training().steps(), 300);  // The last flag wins.
  EXPECT_EQ(config->training().seq_len(), 256);
  EXPECT_DOUBLE_EQ(config->optimizer().lr(), 5e-4);
  EXPECT_TRUE(config->checkpoint().enable());
  EXPECT_FALSE(config->metrics().enable_tensorboard());
  EXPECT_EQ(config->training().seed(), -1);
  ASSERT_EQ(config->model().converters_size(), 2);
  EXPECT_EQ(config->model().converters(0), "float8");
  EXPECT_EQ(config->model().converters(1), "fp8_rowwise");
  EXPECT_EQ(config->compile().components_size(), 0);
  EXPECT_EQ(config->job().config_file(), path);
}

// The initial-load keys refuse what they could not do: nothing to load, or the other format.
TEST(JobConfigTest, InitialLoadKeysNeedAPath) {
  EXPECT_EQ(ValidationError({"--checkpoint.initial_load_in_hf=true"}),
            "[checkpoint] initial_load_in_hf = true: no weights to load; set [checkpoint] "
            "initial_load_path (a Hugging Face folder) or [model] hf_assets_path");
  ExpectValid({"--checkpoint.initial_load_in_hf=true", "--checkpoint.initial_load_path=hf"});
  ExpectValid({"--checkpoint.initial_load_in_hf=true", "--model.hf_assets_path=hf"});
  EXPECT_EQ(ValidationError({"--checkpoint.initial_load_model_only=false"}),
            "[checkpoint] initial_load_model_only = false applies to [checkpoint] "
            "initial_load_path, which is empty: set it, or drop the key");
  // Refused by validation, so a resume (which reads no initial load) refuses it too.
  EXPECT_EQ(ValidationError({"--checkpoint.initial_load_model_only=false",
                             "--checkpoint.initial_load_path=/some/step"}),
            "[checkpoint] initial_load_model_only=false: initial loads take model weights only; "
            "resume a full run through [checkpoint] folder instead");
}

TEST(JobConfigTest, ConfigFileIsRefusedInAFile) {
  EXPECT_EQ(ParseError("[job]\ndescription = \"x\"\nconfig_file = \"other.toml\"\n"),
            "configs/x.toml:3: [job] config_file: set it on the command line "
            "(--job.config_file=FILE); a job file cannot name another");
  // The dump records the file read as a comment, so it runs again as a job file.
  absl::StatusOr<JobConfig> config = ParseJobConfig("configs/llama3_debugmodel.toml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string toml = JobConfigToToml(*config);
  EXPECT_TRUE(absl::StrContains(toml, "\n# config_file = \"configs/llama3_debugmodel.toml\"\n"))
      << toml;
  EXPECT_TRUE(ParseJobConfigText(toml, "dump.toml", {}).ok());
}

TEST(JobConfigTest, ConfigFileFlagNamesTheFile) {
  const std::string path = TempDir() + "/flag.toml";
  ASSERT_TRUE(WriteFileAtomically(path, "[training]\nsteps = 7\n").ok());
  std::string arg0 = "titan_train", arg1 = "--job.config_file", arg2 = path,
              arg3 = "--training.seq_len=64";
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), arg3.data()};
  absl::StatusOr<JobConfig> config = LoadJobConfig(4, argv);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training().steps(), 7);
  EXPECT_EQ(config->training().seq_len(), 64);
  EXPECT_EQ(config->job().config_file(), path);

  absl::StatusOr<JobConfig> two_files =
      ParseJobConfig(path, {"--job.config_file=" + TempDir() + "/other.toml"});
  ASSERT_FALSE(two_files.ok());
  EXPECT_EQ(two_files.status().message(),
            absl::StrCat("--job.config_file=", TempDir(),
                         "/other.toml: the config file is already ", path));

  // Two job files on the command line: the second would drop every key of the first.
  absl::StatusOr<JobConfig> files_in_flags = ParseJobConfig(
      "", {"--job.config_file=" + path, "--job.config_file=" + TempDir() + "/other.toml"});
  ASSERT_FALSE(files_in_flags.ok());
  EXPECT_EQ(files_in_flags.status().message(),
            absl::StrCat("--job.config_file=", path, " and --job.config_file=", TempDir(),
                         "/other.toml: a job reads one job file; set the other's keys as "
                         "--section.key flags"));
  // The same file twice is one file.
  EXPECT_TRUE(ParseJobConfig("", {"--job.config_file=" + path, "--job.config_file=" + path}).ok());

  absl::StatusOr<JobConfig> missing = ParseJobConfig(TempDir() + "/missing.toml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "missing.toml"));

  // An ifstream reads a directory as an empty file: the defaults would run.
  absl::StatusOr<JobConfig> folder = ParseJobConfig(TempDir(), {});
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().message(),
            absl::StrCat(TempDir(), ": is a directory, expected a TOML file"));
}

TEST(JobConfigTest, RangeAndChoiceErrorsInAFileNameItsLine) {
  EXPECT_EQ(ParseError("[job]\ndescription = \"x\"\n\n[training]\nsteps = -3\n"),
            "configs/x.toml:5: [training] steps=-3 is out of range: expected >= 0");
  // The flight recorder's ring grows as it fills, but a size this large is a typo, not a plan.
  EXPECT_EQ(ParseError("[comm]\ntrace_buf_size = 2147483647\n"),
            "configs/x.toml:2: [comm] trace_buf_size=2147483647 is out of range: expected a value "
            "in [0, 1048576]");
  EXPECT_EQ(ParseError("[lr_scheduler]\ndecay_type = \"exp\"\n"),
            "configs/x.toml:2: [lr_scheduler] decay_type=\"exp\": expected one of \"linear\", "
            "\"sqrt\", \"cosine\"");
}

// Checks that run after parsing (validation, the model registry, the optimizer) name where the key
// was set, as the parser's own errors do.
TEST(JobConfigTest, LaterSingleKeyErrorsNameTheFileLineOrFlag) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[checkpoint]\nkeep_latest_k = 1\n\n[activation_checkpoint]\nselective_ac_option = \"abc\"\n"
      "[model]\nflavor = \"debugmodle\"\n",
      {"--model.converters=float9"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ValidateJobConfig(*config).message(),
            "configs/x.toml:2: [checkpoint] keep_latest_k=1: expected 0 (keep all) or >= 2 (the "
            "newest checkpoint may still be being written)");
  config->mutable_checkpoint()->set_keep_latest_k(0);
  EXPECT_EQ(ValidateJobConfig(*config).message(),
            "--model.converters: [model] converters: unknown converter \"float9\"; expected "
            "\"float8\"");
  config->mutable_model()->clear_converters();
  EXPECT_EQ(ValidateJobConfig(*config).message(),
            "configs/x.toml:5: [activation_checkpoint] selective_ac_option=\"abc\": expected a "
            "positive integer N (every Nth layer) or \"op\"");
  // Errors raised outside lib/config, worded "[section] key...", get the same prefix.
  EXPECT_EQ(WithKeySource(absl::NotFoundError("[model] flavor: unknown llama3 flavor")),
            absl::NotFoundError("configs/x.toml:7: [model] flavor: unknown llama3 flavor"));
  EXPECT_EQ(WithKeySource(absl::InvalidArgumentError("[model] flavor=\"x\"")).message(),
            "configs/x.toml:7: [model] flavor=\"x\"");
  // A key left at its default, a sentence that is no key, and OK pass unchanged.
  for (const absl::Status& status :
       {absl::InvalidArgumentError("[model] name: unknown model"),
        absl::InvalidArgumentError("[parallelism] world size 8 is not divisible"),
        absl::InvalidArgumentError("no key here"), absl::OkStatus()}) {
    EXPECT_EQ(WithKeySource(status), status);
  }
  // A flag wins over the file's line; an old name records its new name's key.
  ASSERT_TRUE(
      ParseText("[model]\nflavor = \"a\"\n[job]\nprint_freq = 5\n", {"--model.flavor=b"}).ok());
  EXPECT_EQ(WithKeySource(absl::NotFoundError("[model] flavor: x")).message(),
            "--model.flavor: [model] flavor: x");
  EXPECT_EQ(WithKeySource(absl::NotFoundError("[metrics] log_freq: x")).message(),
            "configs/x.toml:4: [metrics] log_freq: x");
  // Errors naming two keys read as before.
  config = ParseText("", {"--checkpoint.enable=false", "--checkpoint.load_step=4"});
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(absl::StartsWith(ValidateJobConfig(*config).message(), "[checkpoint] load_step"));
}

// A tool that does not read [rl] (titan_train) refuses an unknown key there as [rl]'s, rather than
// suggesting the [rl] key it would refuse next; titan_rl, which reads [rl], gets the suggestion.
TEST(JobConfigTest, AnUnknownKeyOfAnUnreadSectionIsRefusedAsThatSections) {
  const std::string path = TempDir() + "/rl_typo.toml";
  ASSERT_TRUE(WriteFileAtomically(path, "[training]\nsteps = 2\n[rl]\ngroup_sizee = 4\n").ok());
  const UnreadSection rl{"rl", "titan_rl", "titan_train"};
  EXPECT_EQ(ParseJobConfig(path, {}, rl).status().message(),
            path +
                ":4: [rl] group_sizee: [rl] is titan_rl's section, which titan_train would "
                "ignore; remove it or run titan_rl");
  EXPECT_EQ(ParseJobConfig(path, {}).status().message(),
            path + ":4: [rl] group_sizee: unknown key (did you mean \"group_size\"?)");
  EXPECT_EQ(ParseJobConfig("", {"--rl.group_sizee=4"}, rl).status().message(),
            "--rl.group_sizee: [rl] is titan_rl's section, which titan_train would ignore; remove "
            "it or run titan_rl");
  EXPECT_EQ(ParseJobConfig("", {"--rl.group_sizee=4"}).status().message(),
            "--rl.group_sizee: unknown key (did you mean \"--rl.group_size\"?)");
  EXPECT_EQ(
      ParseJobConfig("", {"--validation.batch_size=4"}).status().message(),
      "--validation.batch_size: unknown key (did you mean \"--validation.local_batch_size\"?)");
  // Other sections' typos keep their suggestion; [rl] at its defaults parses, a changed key not.
  EXPECT_EQ(ParseJobConfig("", {"--training.stepz=4"}, rl).status().message(),
            "--training.stepz: unknown key (did you mean \"--training.steps\"?)");
  EXPECT_EQ(ParseJobConfig("", {"--rl.group_size=4"}, rl).status().message(),
            "--rl.group_size: [rl] group_size = 4: [rl] is titan_rl's section, which titan_train "
            "would ignore; leave it at its defaults or run titan_rl");
  EXPECT_TRUE(ParseJobConfig("", {"--rl.group_size=8"}, rl).ok());  // the default
  EXPECT_TRUE(ParseJobConfig("", {"--rl.group_size=4"}).ok());      // titan_rl reads it
  // A misspelt section is not pointed at [rl] either.
  EXPECT_EQ(ParseJobConfig("", {"--rll.group_size=4"}, rl).status().message(),
            "--rll.group_size: unknown section (the nearest, [rl] is titan_rl's section, which "
            "titan_train would ignore)");
  ASSERT_TRUE(WriteFileAtomically(path, "[rll]\ngroup_size = 4\n").ok());
  EXPECT_EQ(ParseJobConfig(path, {}, rl).status().message(),
            path +
                ":1: [rll]: unknown section (the nearest, [rl] is titan_rl's section, which "
                "titan_train would ignore)");
  EXPECT_EQ(ParseJobConfig(path, {}).status().message(),
            path + ":1: [rll]: unknown section (did you mean \"rl\"?)");
}

TEST(JobConfigTest, FileErrorsNameFileLineSectionKeyAndValue) {
  EXPECT_EQ(ParseError("[training]\nstepz = 10\n"),
            "configs/x.toml:2: [training] stepz: unknown key (did you mean \"steps\"?)");
  // Suggestions are current names: print_freq is [metrics] log_freq's old name.
  EXPECT_EQ(ParseError("[job]\nprint_args = true\n"),
            "configs/x.toml:2: [job] print_args: unknown key");
  EXPECT_EQ(ParseError("[training]\nwibblewobble = 10\n"),
            "configs/x.toml:2: [training] wibblewobble: unknown key");
  EXPECT_EQ(ParseError("[trainig]\nsteps = 10\n"),
            "configs/x.toml:1: [trainig]: unknown section (did you mean \"training\"?)");
  // A key another section holds under an old name is pointed at this section's key of that name.
  EXPECT_EQ(ParseError("[validation]\nbatch_size = 4\n"),
            "configs/x.toml:2: [validation] batch_size: unknown key (did you mean "
            "\"local_batch_size\"?)");
  // An old name that names its own section stays there: [checkpoint] enable_checkpoint.
  EXPECT_EQ(ParseError("[validation]\nenable_checkpoint = true\n"),
            "configs/x.toml:2: [validation] enable_checkpoint: unknown key (did you mean "
            "\"[checkpoint] enable\"?)");
  // A section cut short gets the one section it begins, before a closer other name ([comm]).
  EXPECT_EQ(ParseError("[compi]\nsteps = 10\n"),
            "configs/x.toml:1: [compi]: unknown section (did you mean \"compile\"?)");
  // A name cut short gets the one key it begins.
  EXPECT_EQ(ParseError("[validation]\nlocal_batch = 4\n"),
            "configs/x.toml:2: [validation] local_batch: unknown key (did you mean "
            "\"local_batch_size\"?)");
  // A key of another section is named there, by its current name; none where two sections hold it.
  EXPECT_EQ(ParseError("[training]\nlr = 1e-3\n"),
            "configs/x.toml:2: [training] lr: unknown key (did you mean \"[optimizer] lr\"?)");
  EXPECT_EQ(ParseError("[training]\nprint_freq = 5\n"),
            "configs/x.toml:2: [training] print_freq: unknown key (did you mean \"[metrics] "
            "log_freq\"?)");
  EXPECT_EQ(ParseError("[model]\nseq_len = 8\n"), "configs/x.toml:2: [model] seq_len: unknown key");
  EXPECT_EQ(ParseError("steps = 10\n"),
            "configs/x.toml:1: steps: keys belong in a [section], got integer 10 at the top level");
  EXPECT_EQ(ParseError("[training]\nsteps = \"ten\"\n"),
            "configs/x.toml:2: [training] steps: expected integer, got string \"ten\"");
  EXPECT_EQ(ParseError("[training]\nsteps = 10.5\n"),
            "configs/x.toml:2: [training] steps: expected integer, got float 10.5");
  EXPECT_EQ(ParseError("[training]\nsteps = 9999999999\n"),
            "configs/x.toml:2: [training] steps: expected 32-bit integer, got integer 9999999999");
  EXPECT_EQ(ParseError("[optimizer]\nlr = \"fast\"\n"),
            "configs/x.toml:2: [optimizer] lr: expected float, got string \"fast\"");
  EXPECT_EQ(ParseError("[checkpoint]\nenable = 1\n"),
            "configs/x.toml:2: [checkpoint] enable: expected boolean, got integer 1");
  EXPECT_EQ(ParseError("[model]\nflavor = 8\n"),
            "configs/x.toml:2: [model] flavor: expected string, got integer 8");
  EXPECT_EQ(
      ParseError("[model]\nconverters = \"float8\"\n"),
      "configs/x.toml:2: [model] converters: expected list of strings, got string \"float8\"");
  EXPECT_EQ(ParseError("[model]\nconverters = [\"float8\", 2]\n"),
            "configs/x.toml:2: [model] converters: expected list of strings, got array containing "
            "integer 2");
  EXPECT_EQ(ParseError("[training.dataloader]\nnum_workers = 2\n"),
            "configs/x.toml:1: [training] dataloader: unknown key");
  EXPECT_TRUE(absl::StartsWith(ParseError("[training]\nsteps = \n"), "configs/x.toml:2:"))
      << ParseError("[training]\nsteps = \n");
}

TEST(JobConfigTest, FloatKeysAcceptTomlIntegers) {
  absl::StatusOr<JobConfig> config = ParseText("[optimizer]\nlr = 1\nweight_decay = 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->optimizer().lr(), 1.0);
  EXPECT_DOUBLE_EQ(config->optimizer().weight_decay(), 0.0);
}

TEST(JobConfigTest, CommandLineErrorsNameTheFlag) {
  EXPECT_EQ(ParseError("", {"--training.steps=ten"}),
            "--training.steps: expected integer, got \"ten\"");
  EXPECT_EQ(ParseError("", {"--training.steps", "ten"}),
            "--training.steps: expected integer, got \"ten\"");
  EXPECT_EQ(ParseError("", {"--optimizer.lr=fast"}),
            "--optimizer.lr: expected float, got \"fast\"");
  EXPECT_EQ(ParseError("", {"--checkpoint.enable=maybe"}),
            "--checkpoint.enable: expected true or false, got \"maybe\"");
  // As TOML, which refuses print_config = 1.
  for (const char* value : {"1", "0", "yes", "on", "t", "True", "FALSE"}) {
    EXPECT_EQ(ParseError("", {absl::StrCat("--job.print_config=", value)}),
              absl::StrCat("--job.print_config: expected true or false, got \"", value, "\""));
  }
  EXPECT_EQ(ParseError("", {"--job.print_config", "1"}),
            "unexpected argument \"1\": expected --section.key=value");
  EXPECT_EQ(ParseError("", {"--training.stepz=10"}),
            "--training.stepz: unknown key (did you mean \"--training.steps\"?)");
  EXPECT_EQ(ParseError("", {"--job.print_args=true"}), "--job.print_args: unknown key");
  // config.toml, TOML, cannot hold other bytes: the flag is refused, not written back altered.
  EXPECT_EQ(ParseError("", {"--job.dump_folder=out\xe9"}),
            "--job.dump_folder: expected UTF-8 text (TOML, and config.toml, hold only UTF-8), got "
            "\"out\\351\"");
  for (const char* ill_formed : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\xe2\x82"}) {
    EXPECT_NE(ParseError("", {absl::StrCat("--job.description=", ill_formed)}), "") << ill_formed;
  }
  absl::StatusOr<JobConfig> unicode =
      ParseText("", {"--job.description=caf\xc3\xa9 \xf0\x9f\x9a\x80"});
  ASSERT_TRUE(unicode.ok()) << unicode.status();
  EXPECT_EQ(unicode->job().description(), "caf\xc3\xa9 \xf0\x9f\x9a\x80");
  EXPECT_EQ(ParseError("", {"--training.lr=1e-3"}),
            "--training.lr: unknown key (did you mean \"--optimizer.lr\"?)");
  // Not across [rl]'s border: titan_train refuses [rl] keys, titan_rl trains at [rl] learning_rate.
  EXPECT_EQ(ParseError("", {"--training.learning_rate=3e-4"}),
            "--training.learning_rate: unknown key");
  EXPECT_FALSE(absl::StrContains(ParseError("", {"--rl.lr=3e-4"}), "optimizer"));
  // An unknown name is quoted cut short, however long.
  const std::string long_flag =
      ParseError("", {absl::StrCat("--training.", std::string(100000, 'y'), "=1")});
  EXPECT_LT(long_flag.size(), 200u) << long_flag.substr(0, 300);
  EXPECT_TRUE(absl::StrContains(long_flag, "yyy (100009 bytes): unknown key")) << long_flag;
  const std::string long_key =
      ParseError(absl::StrCat("[training]\n", std::string(5000, 'x'), " = 1\n"));
  EXPECT_LT(long_key.size(), 200u) << long_key.substr(0, 300);
  EXPECT_TRUE(absl::StrContains(long_key, "xxx (5000 bytes): unknown key")) << long_key;
  const std::string long_section =
      ParseError(absl::StrCat("[", std::string(5000, 's'), "]\nx = 1\n"));
  EXPECT_LT(long_section.size(), 200u) << long_section.substr(0, 300);
  EXPECT_EQ(ParseError("", {"--training.max_norms=1"}),
            "--training.max_norms: unknown key (did you mean \"--training.max_norm\"?)");
  EXPECT_EQ(ParseError("", {"--training.batch_sizes=8"}), "--training.batch_sizes: unknown key");
  EXPECT_EQ(ParseError("", {"--trainig.steps=10"}),
            "--trainig.steps: unknown section (did you mean \"training\"?)");
  EXPECT_EQ(ParseError("", {"--training.steps"}), "--training.steps: missing value (integer)");
  EXPECT_EQ(ParseError("", {"--training.steps", "--training.seq_len=8"}),
            "--training.steps: missing value (integer)");
  EXPECT_EQ(ParseError("", {"--steps=10"}), "--steps: expected --section.key (see --help)");
  EXPECT_EQ(ParseError("", {"training.steps=10"}),
            "unexpected argument \"training.steps=10\": expected --section.key=value");
  EXPECT_EQ(ParseError("", {"--checkpoint.enable", "yes please"}),
            "unexpected argument \"yes please\": expected --section.key=value");
}

TEST(JobConfigTest, BooleanFlagsTakeTrueOrFalse) {
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, bool>>{
           {{"--job.print_config=true"}, true},
           {{"--job.print_config=false"}, false},
           {{"--job.print_config", "false"}, false},
           {{"--job.print_config"}, true}}) {
    absl::StatusOr<JobConfig> config = ParseText("", flags);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->job().print_config(), expected) << flags[0];
  }
}

TEST(JobConfigTest, ParamGroupsAreAListOfTablesInFilesAndOnTheCommandLine) {
  const std::string inline_tables =
      "[optimizer]\nparam_groups = [{pattern = \"norm|bias$\", weight_decay = 0.0}, "
      "{pattern = \"tok_embeddings\", lr = 1e-4, betas = [0.8, 0.9]}]\n";
  const std::string array_of_tables =
      "[[optimizer.param_groups]]\npattern = \"norm|bias$\"\nweight_decay = 0\n"
      "[[optimizer.param_groups]]\npattern = \"tok_embeddings\"\nlr = 1e-4\nbetas = [0.8, 0.9]\n";
  for (const std::string& toml : {inline_tables, array_of_tables}) {
    absl::StatusOr<JobConfig> config = ParseText(toml);
    ASSERT_TRUE(config.ok()) << config.status();
    const JobConfig::Optimizer& o = config->optimizer();
    ASSERT_EQ(o.param_groups_size(), 2) << toml;
    EXPECT_EQ(o.param_groups(0).pattern(), "norm|bias$");
    EXPECT_TRUE(o.param_groups(0).has_weight_decay());
    EXPECT_EQ(o.param_groups(0).weight_decay(), 0.0);
    // Keys a table leaves out stay unset: the group takes [optimizer]'s values.
    EXPECT_FALSE(o.param_groups(0).has_lr());
    EXPECT_EQ(o.param_groups(0).betas_size(), 0);
    EXPECT_EQ(o.param_groups(1).pattern(), "tok_embeddings");
    EXPECT_DOUBLE_EQ(o.param_groups(1).lr(), 1e-4);
    EXPECT_FALSE(o.param_groups(1).has_weight_decay());
    ASSERT_EQ(o.param_groups(1).betas_size(), 2);
    EXPECT_DOUBLE_EQ(o.param_groups(1).betas(1), 0.9);
    EXPECT_TRUE(ValidateJobConfig(*config).ok()) << ValidateJobConfig(*config);
  }

  // A flag replaces the file's whole list; an empty value clears it.
  absl::StatusOr<JobConfig> replaced = ParseText(
      inline_tables, {"--optimizer.param_groups=[{pattern = \"norm\", weight_decay = 0.0}]"});
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  ASSERT_EQ(replaced->optimizer().param_groups_size(), 1);
  EXPECT_EQ(replaced->optimizer().param_groups(0).pattern(), "norm");
  absl::StatusOr<JobConfig> cleared = ParseText(inline_tables, {"--optimizer.param_groups", "[]"});
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_EQ(cleared->optimizer().param_groups_size(), 0);
  EXPECT_EQ(
      ParseText(inline_tables, {"--optimizer.param_groups="})->optimizer().param_groups_size(), 0);
}

TEST(JobConfigTest, StringListsOnTheCommandLineAreCommaSeparatedOrTomlArrays) {
  for (const char* flag : {"--checkpoint.exclude_from_loading=dataloader, rng",
                           "--checkpoint.exclude_from_loading=[\"dataloader\", \"rng\"]"}) {
    absl::StatusOr<JobConfig> config = ParseText("", {flag});
    ASSERT_TRUE(config.ok()) << flag << ": " << config.status();
    EXPECT_EQ(std::vector<std::string>(config->checkpoint().exclude_from_loading().begin(),
                                       config->checkpoint().exclude_from_loading().end()),
              (std::vector<std::string>{"dataloader", "rng"}))
        << flag;
  }
  EXPECT_EQ(ParseError("", {"--float8.filter_fqns=,output"}),
            "--float8.filter_fqns: an empty item in the comma-separated list \",output\"");
  EXPECT_EQ(ParseError("", {"--model.converters=float8,"}),
            "--model.converters: an empty item in the comma-separated list \"float8,\"");
  EXPECT_TRUE(absl::StartsWith(ParseError("", {"--model.converters=[\"float8\", 2]"}),
                               "--model.converters: expected list of strings, got array"))
      << ParseError("", {"--model.converters=[\"float8\", 2]"});
}

TEST(JobConfigTest, ParamGroupErrorsNameTheTableAndKey) {
  EXPECT_EQ(ParseError("[optimizer]\nparam_groups = [{pattern = \"norm\"}, "
                       "{pattern = \"bias\", wieght_decay = 0.0}]\n"),
            "configs/x.toml:2: [optimizer] param_groups[1].wieght_decay: unknown key (did you mean "
            "\"weight_decay\"?)");
  EXPECT_EQ(
      ParseError("[optimizer]\nparam_groups = [{pattern = \"norm\", lr = \"fast\"}]\n"),
      "configs/x.toml:2: [optimizer] param_groups[0].lr: expected float, got string \"fast\"");
  EXPECT_EQ(
      ParseError("[optimizer]\nparam_groups = [{pattern = 3}]\n"),
      "configs/x.toml:2: [optimizer] param_groups[0].pattern: expected string, got integer 3");
  EXPECT_EQ(ParseError("[optimizer]\nparam_groups = [{pattern = \"x\", betas = [0.9, \"b\"]}]\n"),
            "configs/x.toml:2: [optimizer] param_groups[0].betas: expected list of floats, got "
            "array containing string \"b\"");
  EXPECT_EQ(ParseError("[optimizer]\nparam_groups = {pattern = \"norm\"}\n"),
            "configs/x.toml:2: [optimizer] param_groups: expected list of tables, got table");
  EXPECT_EQ(ParseError("[optimizer]\nparam_groups = [\"norm\"]\n"),
            "configs/x.toml:2: [optimizer] param_groups: expected list of tables, got array "
            "containing string \"norm\"");
  EXPECT_EQ(ParseError("", {"--optimizer.param_groups=[{pattern = \"x\", wieght_decay = 0.0}]"}),
            "--optimizer.param_groups[0].wieght_decay: unknown key (did you mean "
            "\"weight_decay\"?)");
  EXPECT_EQ(ParseError("", {"--optimizer.param_groups=[{pattern = \"x\", lr = true}]"}),
            "--optimizer.param_groups[0].lr: expected float, got boolean true");
  EXPECT_TRUE(absl::StartsWith(
      ParseError("", {"--optimizer.param_groups=[{pattern = }]"}),
      "--optimizer.param_groups: expected list of tables as a TOML inline value, got "
      "\"[{pattern = }]\" ("))
      << ParseError("", {"--optimizer.param_groups=[{pattern = }]"});
  EXPECT_EQ(ParseError("", {"--optimizer.param_groups=[]\nlr = 1"}),
            "--optimizer.param_groups: expected one TOML inline value, got \"[]\\nlr = 1\"");

  EXPECT_EQ(
      ValidationError({"--optimizer.param_groups=[{pattern = \"x\", lr = -1}]"}),
      "--optimizer.param_groups: [optimizer] param_groups[0].lr=-1 is out of range: expected >= 0 "
      "and " +
          kFloat32Range);
  EXPECT_EQ(ValidationError({"--optimizer.param_groups=[{pattern = \"x\"}, "
                             "{pattern = \"y\", betas = [0.9, 1.5]}]"}),
            "--optimizer.param_groups: [optimizer] param_groups[1].betas=1.5 is out of range: "
            "expected a value in [0, 1)");
}

// torch.optim refuses beta = 1 (the moment estimate never decays: the loss turns NaN).
TEST(JobConfigTest, BetasOfOneAreRefusedEverywhere) {
  EXPECT_EQ(ValidationError({"--optimizer.beta1=1"}),
            "--optimizer.beta1: [optimizer] beta1=1 is out of range: expected a value in [0, 1)");
  EXPECT_EQ(ValidationError({"--optimizer.beta2=1"}),
            "--optimizer.beta2: [optimizer] beta2=1 is out of range: expected a value in [0, 1)");
  EXPECT_EQ(ValidationError({"--optimizer.param_groups=[{pattern = \"x\", beta1 = 1}]"}),
            "--optimizer.param_groups: [optimizer] param_groups[0].beta1=1 is out of range: "
            "expected a value in [0, 1)");
  EXPECT_EQ(ValidationError({"--optimizer.param_groups=[{pattern = \"x\", beta2 = 1.0}]"}),
            "--optimizer.param_groups: [optimizer] param_groups[0].beta2=1 is out of range: "
            "expected a value in [0, 1)");
  EXPECT_EQ(ValidationError({"--optimizer.param_groups=[{pattern = \"x\", betas = [0.9, 1]}]"}),
            "--optimizer.param_groups: [optimizer] param_groups[0].betas=1 is out of range: "
            "expected a value in [0, 1)");
  EXPECT_EQ(ParseError("[optimizer]\nbeta2 = 1.0\n"),
            "configs/x.toml:2: [optimizer] beta2=1 is out of range: expected a value in [0, 1)");
  ExpectValid({"--optimizer.beta1=0", "--optimizer.beta2=0.999999"});
  EXPECT_TRUE(absl::StrContains(JobConfigHelp(), "range: a value in [0, 1)"));
}

TEST(JobConfigTest, NamedDatasetNeedsItsOwnPath) {
  // torchtitan streams dataset = "c4" from the Hub; here it would train on the toy corpus.
  EXPECT_EQ(ValidationError({"--training.dataset=c4"}),
            "[training] dataset = \"c4\" without a dataset_path would train on the bundled toy "
            "corpus (assets/default_corpus/train.jsonl): titan reads local files only; set "
            "[training] dataset_path to your copy of c4, or dataset = \"default\"");
  EXPECT_TRUE(absl::StrContains(
      ValidationError({"--validation.enable=true", "--validation.dataset=c4_validation"}),
      "[validation] dataset = \"c4_validation\" without a dataset_path would validate on the "
      "bundled toy corpus"));
  ExpectValid({"--training.dataset=c4", "--training.dataset_path=data/c4"});
  // Named on purpose: the bundled corpus under another name.
  ExpectValid(
      {"--training.dataset=c4", "--training.dataset_path=assets/default_corpus/train.jsonl"});
  ExpectValid({"--validation.enable=false", "--validation.dataset=c4_validation"});
  // An empty path is no file, in either section (validation's only while it runs).
  EXPECT_EQ(
      ValidationError({"--training.dataset_path="}),
      "--training.dataset_path: [training] dataset_path: expected a JSON lines file or a folder of "
      "them, got \"\"");
  EXPECT_EQ(ValidationError({"--validation.enable=true", "--validation.dataset_path="}),
            "--validation.dataset_path: [validation] dataset_path: expected a JSON lines file or a "
            "folder of "
            "them, got \"\"");
  ExpectValid({"--validation.enable=false", "--validation.dataset_path="});
}

TEST(JobConfigTest, SeedJobFileLoadsUnchangedThroughOldNames) {
  absl::StatusOr<JobConfig> config = ParseJobConfig("tests/fixtures/llama3_8b.seed.toml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  // [job] print_freq and enable_tensorboard, [training] batch_size and mixed_precision_dtype.
  EXPECT_TRUE(config->metrics().has_log_freq());
  EXPECT_EQ(config->metrics().log_freq(), 10);
  EXPECT_TRUE(config->metrics().enable_tensorboard());
  EXPECT_TRUE(config->training().has_local_batch_size());
  EXPECT_EQ(config->training().local_batch_size(), 8);
  EXPECT_TRUE(config->training().has_mixed_precision_param());
  EXPECT_EQ(config->training().mixed_precision_param(), "bfloat16");
  EXPECT_EQ(config->model().norm_type(), "rmsnorm");
  EXPECT_EQ(config->job().monitoring_interval(), 1);
  EXPECT_EQ(config->model().flavor(), "8B");
  EXPECT_EQ(config->model().tokenizer_path(), "./torchtitan/datasets/tokenizer/tokenizer.model");
  EXPECT_DOUBLE_EQ(config->optimizer().lr(), 3e-4);
  EXPECT_EQ(config->training().seq_len(), 8192);
  EXPECT_EQ(config->training().steps(), 5000);
  EXPECT_EQ(config->parallelism().data_parallel_shard_degree(), 8);
  EXPECT_TRUE(ValidateJobConfig(*config, 8).ok()) << ValidateJobConfig(*config, 8);
  EXPECT_EQ(ValidateJobConfig(*config, 1).message(),
            "[parallelism] data_parallel_replicate_degree=1 × tensor_parallel_degree=1 × "
            "pipeline_parallel_degree=1 × context_parallel_degree=1 × "
            "data_parallel_shard_degree=8 = 8, but the world size is 1");
}

TEST(JobConfigTest, OldNamesLandInNewKeys) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[job]\nprint_freq = 3\nenable_tensorboard = true\nmonitoring_interval = 5\n"
      "[training]\nbatch_size = 4\nmixed_precision_dtype = \"float32\"\n"
      "[checkpoint]\nenable_checkpoint = true\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->metrics().log_freq(), 3);
  EXPECT_TRUE(config->metrics().enable_tensorboard());
  EXPECT_EQ(config->training().local_batch_size(), 4);
  EXPECT_EQ(config->training().mixed_precision_param(), "float32");
  EXPECT_TRUE(config->checkpoint().enable());

  absl::StatusOr<JobConfig> from_flags =
      ParseText("", {"--training.batch_size=2", "--job.print_freq", "7"});
  ASSERT_TRUE(from_flags.ok()) << from_flags.status();
  EXPECT_EQ(from_flags->training().local_batch_size(), 2);
  EXPECT_EQ(from_flags->metrics().log_freq(), 7);

  // torchtitan's older [lr_scheduler] lr_min: the same ratio of optimizer.lr as min_lr_factor.
  absl::StatusOr<JobConfig> lr_min = ParseText("[lr_scheduler]\nlr_min = 0.1\n");
  ASSERT_TRUE(lr_min.ok()) << lr_min.status();
  EXPECT_DOUBLE_EQ(lr_min->lr_scheduler().min_lr_factor(), 0.1);
  absl::StatusOr<JobConfig> lr_min_flag = ParseText("", {"--lr_scheduler.lr_min=0.2"});
  ASSERT_TRUE(lr_min_flag.ok()) << lr_min_flag.status();
  EXPECT_DOUBLE_EQ(lr_min_flag->lr_scheduler().min_lr_factor(), 0.2);

  // A flag with the new name overrides a file's old name: they are different sources.
  absl::StatusOr<JobConfig> overridden =
      ParseText("[training]\nbatch_size = 4\n", {"--training.local_batch_size=16"});
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->training().local_batch_size(), 16);
}

TEST(JobConfigTest, OtherNamesAreReadAsTitansWithoutCallingThemWrong) {
  // [debug] seed is newer torchtitan's home of the key, not an old name to replace.
  testing::internal::CaptureStderr();
  absl::StatusOr<JobConfig> config = ParseText("[debug]\nseed = 3\n[training]\nbatch_size = 4\n");
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training().seed(), 3);
  EXPECT_THAT(log, HasSubstr("[debug] seed is read as training.seed, titan's name for it"));
  EXPECT_THAT(log, HasSubstr("[training] batch_size is read as training.local_batch_size, "
                             "titan's name for it"));
  EXPECT_THAT(log, Not(HasSubstr("old name")));
}

TEST(JobConfigTest, OldAndNewNameTogetherIsAnError) {
  EXPECT_EQ(ParseError("[job]\nprint_freq = 3\n[metrics]\nlog_freq = 5\n"),
            "configs/x.toml:4: [job] print_freq and [metrics] log_freq name the same key "
            "metrics.log_freq; set only one of them");
  EXPECT_EQ(ParseError("[training]\nbatch_size = 4\nlocal_batch_size = 4\n"),
            "configs/x.toml:3: [training] batch_size and [training] local_batch_size name the same "
            "key training.local_batch_size; set only one of them");
  EXPECT_EQ(ParseError("", {"--training.local_batch_size=2", "--training.batch_size=2"}),
            "--training.local_batch_size and --training.batch_size name the same key "
            "training.local_batch_size; set only one of them");
}

// torchtitan's job_config (before its TOML files gave way to Python configs) moved [float8] to
// [quantize.linear.float8] and the converter to "quantize.linear.float8": both are read as titan's.
TEST(JobConfigTest, TorchtitanQuantizeLinearFloat8IsFloat8) {
  absl::StatusOr<JobConfig> old_names = ParseText(
      "[model]\nconverters = [\"float8\"]\n"
      "[float8]\nemulate = true\nrecipe_name = \"rowwise\"\nfilter_fqns = [\"output\"]\n");
  ASSERT_TRUE(old_names.ok()) << old_names.status();
  EXPECT_TRUE(old_names->float8().emulate());
  const std::vector<std::string> new_names = {
      "[model]\nconverters = [\"quantize.linear.float8\"]\n[quantize.linear.float8]\n"
      "emulate = true\nrecipe_name = \"rowwise\"\nfilter_fqns = [\"output\"]\n",
      // The same tables as dotted keys.
      "[model]\nconverters = [\"quantize.linear.float8\"]\n[quantize]\nlinear.float8.emulate = "
      "true\nlinear.float8.recipe_name = \"rowwise\"\nlinear.float8.filter_fqns = [\"output\"]\n"};
  for (const std::string& toml : new_names) {
    absl::StatusOr<JobConfig> config = ParseText(toml);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*config, *old_names)) << toml;
  }
  absl::StatusOr<JobConfig> flags = ParseText(
      "", {"--model.converters=quantize.linear.float8", "--quantize.linear.float8.emulate",
           "--quantize.linear.float8.recipe_name=rowwise",
           "--quantize.linear.float8.filter_fqns=output"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*flags, *old_names));
  EXPECT_EQ(KeySource("float8", "emulate"), "--quantize.linear.float8.emulate");
  EXPECT_TRUE(ValidateJobConfig(*flags).ok()) << ValidateJobConfig(*flags);
}

TEST(JobConfigTest, TorchtitanQuantizeLinearFloat8ErrorsNameItsKeys) {
  EXPECT_EQ(ParseError("[quantize.linear.float8]\nemulat = true\n"),
            "configs/x.toml:2: [quantize.linear.float8] emulat: unknown key (did you mean "
            "\"emulate\"?)");
  EXPECT_EQ(ParseError("[quantize.linear.float8]\nemulate = 1\n"),
            "configs/x.toml:2: [quantize.linear.float8] emulate: expected boolean, got integer 1");
  EXPECT_EQ(ParseError("", {"--quantize.linear.float8.emulat=true"}),
            "--quantize.linear.float8.emulat: unknown key (did you mean "
            "\"--quantize.linear.float8.emulate\"?)");
  EXPECT_EQ(ParseError("[float8]\nemulate = true\n[quantize.linear.float8]\nemulate = true\n"),
            "configs/x.toml:4: [float8] emulate and [quantize.linear.float8] emulate name the same "
            "key float8.emulate; set only one of them");
  // torchtitan's other quantize tables are not titan's.
  EXPECT_EQ(ParseError("[quantize.linear.mx]\nrecipe_name = \"mxfp8\"\n"),
            "configs/x.toml:1: [quantize.linear.mx]: unknown section; under [quantize.linear] "
            "titan reads only [quantize.linear.float8]");
  EXPECT_EQ(ParseError("[quantize]\nlinear = 1\n"),
            "configs/x.toml:2: [quantize] linear: unknown key; under [quantize] titan reads only "
            "[quantize.linear.float8]");
  EXPECT_EQ(ParseError("", {"--quantize.grouped_mm.float8.fqns=experts"}),
            "--quantize.grouped_mm.float8.fqns: unknown section [quantize.grouped_mm.float8]; "
            "under [quantize] titan reads only [quantize.linear.float8]");
  EXPECT_EQ(ValidationError({"--model.converters=quantize.grouped_mm.float8"}),
            "--model.converters: [model] converters: unknown converter "
            "\"quantize.grouped_mm.float8\"; expected \"float8\"");
}

// ATen refuses them only at the first step ("value cannot be converted to type float without
// overflow"), naming no key; validation refuses them before anything is built.
TEST(JobConfigTest, OptimizerValuesPastFloat32AreRefused) {
  for (const std::string key : {"lr", "eps", "weight_decay"}) {
    EXPECT_EQ(ValidationError({"--optimizer." + key + "=1e39"}),
              absl::StrCat("--optimizer.", key, ": [optimizer] ", key,
                           "=1e+39 is out of range: expected >= 0 and ", kFloat32Range));
    EXPECT_EQ(ValidationError({absl::StrCat("--optimizer.param_groups=[{pattern = \"x\", ", key,
                                            " = 3.5e38}]")}),
              absl::StrCat("--optimizer.param_groups: [optimizer] param_groups[0].", key,
                           "=3.5e+38 is out of range: expected >= 0 and ", kFloat32Range));
    ExpectValid({"--optimizer." + key + "=3.4028234663852886e38"});  // float32's largest
  }
  EXPECT_EQ(ValidationError({"--rl.learning_rate=1e39"}),
            "--rl.learning_rate: [rl] learning_rate=1e+39 is out of range: expected >= 0 and " +
                kFloat32Range);
}

TEST(JobConfigTest, ValidationRefusesImpossibleValues) {
  EXPECT_EQ(ValidationError({"--training.global_batch_size=12"}),
            "[training] global_batch_size=12 is not a multiple of local_batch_size=8 × "
            "data-parallel degree=1");
  EXPECT_EQ(ValidationError(
                {"--training.global_batch_size=48", "--parallelism.tensor_parallel_degree=2"}, 8),
            "[training] global_batch_size=48 is not a multiple of local_batch_size=8 × "
            "data-parallel degree=4");
  ExpectValid({"--training.global_batch_size=64", "--parallelism.tensor_parallel_degree=2"}, 8);
  EXPECT_EQ(ValidationError({"--training.global_batch_size=0"}),
            "--training.global_batch_size: [training] global_batch_size=0 is out of range: "
            "expected -1 or >= 1");
  EXPECT_EQ(ValidationError({"--training.steps=-5"}),
            "--training.steps: [training] steps=-5 is out of range: expected >= 0");
  EXPECT_EQ(ValidationError({"--training.seq_len=0"}),
            "--training.seq_len: [training] seq_len=0 is out of range: expected >= 1");
  EXPECT_EQ(
      ValidationError({"--optimizer.lr=-0.001"}),
      "--optimizer.lr: [optimizer] lr=-0.001 is out of range: expected >= 0 and " + kFloat32Range);
  EXPECT_EQ(
      ValidationError({"--optimizer.lr=nan"}),
      "--optimizer.lr: [optimizer] lr=nan is out of range: expected >= 0 and " + kFloat32Range);
  EXPECT_EQ(
      ValidationError({"--optimizer.lr=inf"}),
      "--optimizer.lr: [optimizer] lr=inf is out of range: expected >= 0 and " + kFloat32Range);
  EXPECT_EQ(ValidationError({"--training.max_norm=inf"}),
            "--training.max_norm: [training] max_norm=inf is out of range: expected a finite "
            "number, >= 0");
  EXPECT_EQ(ValidationError({"--optimizer.param_groups=[{pattern = \"x\", eps = inf}]"}),
            "--optimizer.param_groups: [optimizer] param_groups[0].eps=inf is out of range: "
            "expected >= 0 and " +
                kFloat32Range);
  EXPECT_EQ(
      ValidationError({"--job.dump_folder="}),
      "--job.dump_folder: [job] dump_folder: expected a folder for the job's outputs, got \"\"");
  EXPECT_EQ(ValidationError({"--training.dataset_text_field="}),
            "--training.dataset_text_field: [training] dataset_text_field: expected the JSON field "
            "holding each document's text, "
            "got \"\"");
  EXPECT_EQ(
      ValidationError({"--model.converters=mxfp8"}),
      "--model.converters: [model] converters: unknown converter \"mxfp8\"; expected \"float8\"");
  EXPECT_EQ(ValidationError({"--model.converters=float8,float8"}),
            "--model.converters: [model] converters: \"float8\" is listed twice");
  ExpectValid({"--model.converters=float8"});
  EXPECT_EQ(ValidationError({"--lr_scheduler.decay_ratio=1.5"}),
            "--lr_scheduler.decay_ratio: [lr_scheduler] decay_ratio=1.5 is out of range: expected "
            "-1 or a value in [0, 1]");
  EXPECT_EQ(ValidationError({"--lr_scheduler.decay_ratio=-0.5"}),
            "--lr_scheduler.decay_ratio: [lr_scheduler] decay_ratio=-0.5 is out of range: expected "
            "-1 or a value in [0, 1]");
  ExpectValid({"--lr_scheduler.decay_ratio=0.8"});
  ExpectValid({"--lr_scheduler.decay_ratio=-1"});
  ExpectValid({"--lr_scheduler.warmup_steps=50", "--training.steps=10"});  // shortened, warned
  EXPECT_EQ(ValidationError({"--lr_scheduler.decay_type=exp"}),
            "--lr_scheduler.decay_type: [lr_scheduler] decay_type=\"exp\": expected one of "
            "\"linear\", \"sqrt\", \"cosine\"");
  EXPECT_EQ(ValidationError({"--activation_checkpoint.mode=partial"}),
            "--activation_checkpoint.mode: [activation_checkpoint] mode=\"partial\": expected one "
            "of \"none\", \"selective\", "
            "\"full\"");
  // The pipeline schedule takes any case, as torch's get_schedule_class; other choices do not.
  for (const char* text : {"gpipe", "zbvzerobubble"}) {
    absl::StatusOr<JobConfig> any_case =
        ParseText(absl::StrCat("[parallelism]\npipeline_parallel_schedule = \"", text, "\"\n"));
    ASSERT_TRUE(any_case.ok()) << any_case.status();
    EXPECT_TRUE(ValidateJobConfig(*any_case, 1).ok());
  }
  EXPECT_EQ(ParseText("", {"--parallelism.pipeline_parallel_schedule=interleaved1f1b"})
                ->parallelism()
                .pipeline_parallel_schedule(),
            "Interleaved1F1B");
  EXPECT_EQ(ValidationError({"--lr_scheduler.decay_type=Linear"}),
            "--lr_scheduler.decay_type: [lr_scheduler] decay_type=\"Linear\": expected one of "
            "\"linear\", \"sqrt\", \"cosine\"");
  EXPECT_EQ(ValidationError({"--model.norm_type=layernorm"}),
            "--model.norm_type: [model] norm_type=\"layernorm\": expected one of \"rmsnorm\"");
  EXPECT_EQ(
      ValidationError({"--compile.components=model,graph"}),
      "--compile.components: [compile] components=\"graph\": expected one of \"model\", \"loss\"");
  // The default set in another order is the default, which titan's lack of a compiler allows.
  ExpectValid({"--compile.components=loss,model"});
  ExpectValid({"--compile.components=model,loss,model"});
  EXPECT_EQ(ValidationError({"--compile.components=loss"}),
            "--compile.components: [compile] components = [\"loss\"]: titan has no graph compiler "
            "(C++ has no torch.compile)");
  EXPECT_EQ(ValidationError({"--compile.disabled_kernels=adam,rmsnorm"}),
            "--compile.disabled_kernels: [compile] disabled_kernels=\"rmsnorm\": expected one of "
            "\"rope\", \"swiglu\", "
            "\"float8_cast\", \"adam\", \"bf16_weight_copies\", \"cross_entropy\", "
            "\"mixed_precision_linear\"");
  ExpectValid({"--compile.disabled_kernels=adam,cross_entropy"});
  EXPECT_EQ(ValidationError({"--activation_checkpoint.selective_ac_option=0"}),
            "--activation_checkpoint.selective_ac_option: [activation_checkpoint] "
            "selective_ac_option=\"0\": expected a positive integer N "
            "(every Nth layer) or \"op\"");
  ExpectValid({"--activation_checkpoint.selective_ac_option=op"});
  ExpectValid({"--activation_checkpoint.selective_ac_option=3"});
  EXPECT_EQ(ValidationError({"--checkpoint.keep_latest_k=1"}),
            "--checkpoint.keep_latest_k: [checkpoint] keep_latest_k=1: expected 0 (keep all) or >= "
            "2 (the newest checkpoint "
            "may still be being written)");
  EXPECT_EQ(
      ValidationError({"--checkpoint.last_save_in_hf", "--checkpoint.last_save_model_only=false"}),
      "[checkpoint] last_save_in_hf=true needs last_save_model_only=true (safetensors hold "
      "only model weights)");
  EXPECT_EQ(ValidationError({"--profiling.enable_profiling", "--profiling.profile_freq=3"}),
            "[profiling] profiler_warmup=3 + profiler_active=1 exceeds profile_freq=3: a cycle "
            "must fit its warmup and traced steps");
  EXPECT_EQ(ValidationError({"--profiling.enable_profiling", "--profiling.profile_freq=3",
                             "--profiling.profiler_warmup=2147483647"}),
            "[profiling] profiler_warmup=2147483647 + profiler_active=1 exceeds profile_freq=3: "
            "a cycle must fit its warmup and traced steps");
  ExpectValid({"--profiling.profile_freq=3"});  // torchtitan checks the cycle only when profiling
  ExpectValid({"--profiling.enable_profiling", "--profiling.profile_freq=4"});
  EXPECT_EQ(
      ValidationError({"--profiling.profiler_active=0"}),
      "--profiling.profiler_active: [profiling] profiler_active=0 is out of range: expected >= 1");
}

TEST(JobConfigTest, FusedLossRefusesKeysItWouldIgnore) {
  const std::vector<std::string> tp2 = {"--training.loss_chunk_size=256",
                                        "--parallelism.tensor_parallel_degree=2"};
  ExpectValid(tp2, 2);
  std::vector<std::string> gathered = tp2;
  gathered.push_back("--parallelism.disable_loss_parallel=true");
  EXPECT_EQ(ValidationError(gathered, 2),
            "[training] loss_chunk_size with [parallelism] disable_loss_parallel = true: the fused "
            "loss never builds logits to gather (it runs on the head's vocabulary shards); drop "
            "one");
  EXPECT_NE(ValidationError({"--training.loss_chunk_size=256", "--debug.batch_invariant=true"})
                .find("not batch-invariant"),
            std::string::npos);
  EXPECT_EQ(
      ValidationError({"--training.loss_chunk_size=-1"}),
      "--training.loss_chunk_size: [training] loss_chunk_size=-1 is out of range: expected >= 0");
}

TEST(JobConfigTest, KeysOfAFeatureThatIsOffAreRefused) {
  EXPECT_EQ(ValidationError({"--checkpoint.enable=false", "--checkpoint.load_step=4"}),
            "[checkpoint] load_step = 4 applies to [checkpoint] enable = true (resuming), which is "
            "false: set it, or drop the key");
  ExpectValid({"--checkpoint.enable=true", "--checkpoint.load_step=4"});
  EXPECT_EQ(
      ValidationError({"--checkpoint.enable=false", "--checkpoint.exclude_from_loading=optimizer"}),
      "[checkpoint] exclude_from_loading applies to [checkpoint] enable = true (resuming), "
      "which is false: set it, or drop the key");
  ExpectValid({"--checkpoint.enable=true", "--checkpoint.exclude_from_loading=optimizer,rng"});
  // Unknown names are refused whether checkpointing is on or off.
  for (const char* enable : {"--checkpoint.enable=true", "--checkpoint.enable=false"}) {
    EXPECT_EQ(ValidationError({enable, "--checkpoint.exclude_from_loading=optimizer,bogus"}),
              "--checkpoint.exclude_from_loading: [checkpoint] exclude_from_loading=\"bogus\": "
              "expected one of \"optimizer\", "
              "\"lr_scheduler\", \"dataloader\", \"train_state\", \"rng\"");
  }
  for (const char* key : {"--checkpoint.enable_first_step_checkpoint=true",
                          "--checkpoint.async_mode=async", "--checkpoint.last_save_in_hf=true"}) {
    const std::string name = std::string(key).substr(13, std::string(key).find('=') - 13);
    EXPECT_TRUE(absl::StartsWith(ValidationError({"--checkpoint.enable=false", key}),
                                 absl::StrCat("[checkpoint] ", name, " = ")))
        << ValidationError({"--checkpoint.enable=false", key});
    ExpectValid({"--checkpoint.enable=true", key});
  }
  EXPECT_EQ(ValidationError({"--checkpoint.enable=false", "--checkpoint.async_mode=async"}),
            "[checkpoint] async_mode = \"async\" applies to [checkpoint] enable = true (saving), "
            "which is false: set it, or drop the key");
  EXPECT_EQ(ValidationError({"--checkpoint.enable=true", "--checkpoint.export_dtype=bfloat16",
                             "--checkpoint.last_save_model_only=false"}),
            "[checkpoint] export_dtype = \"bfloat16\" applies to the model-only final save "
            "(enable = true and last_save_model_only = true), but last_save_model_only is false "
            "(the final save keeps float32 for resuming): change that, or drop the key");
  EXPECT_EQ(ValidationError({"--checkpoint.enable=false", "--checkpoint.export_dtype=float16"}),
            "[checkpoint] export_dtype = \"float16\" applies to the model-only final save "
            "(enable = true and last_save_model_only = true), but enable is false: change that, "
            "or drop the key");
  ExpectValid({"--checkpoint.enable=true", "--checkpoint.export_dtype=bfloat16"});
  // Layout keys torchtitan's job files carry at any scale stay accepted while their feature is off
  // (llama3_8b.toml's selective_ac_option = "op" under --activation_checkpoint.mode=none).
  ExpectValid(
      {"--activation_checkpoint.mode=none", "--activation_checkpoint.selective_ac_option=op",
       "--checkpoint.enable=false", "--checkpoint.interval=7", "--checkpoint.keep_latest_k=3",
       "--checkpoint.last_save_model_only=false", "--parallelism.pipeline_parallel_schedule=GPipe",
       "--parallelism.pipeline_parallel_microbatch_size=2",
       "--parallelism.enable_sequence_parallel=false", "--profiling.profile_freq=5",
       "--metrics.save_tb_folder=tb2"});
  EXPECT_EQ(ValidationError({"--parallelism.pipeline_parallel_split_points=layers.99"}),
            "[parallelism] pipeline_parallel_split_points applies to pipeline_parallel_degree > "
            "1, which is 1: raise it, or drop the key");
  EXPECT_EQ(ValidationError({"--parallelism.pipeline_parallel_schedule_csv=/nonexistent.csv"}),
            "[parallelism] pipeline_parallel_schedule_csv applies to pipeline_parallel_degree > "
            "1, which is 1: raise it, or drop the key");
  ExpectValid({"--parallelism.pipeline_parallel_degree=2",
               "--parallelism.pipeline_parallel_split_points=layers.3",
               "--parallelism.pipeline_parallel_schedule_csv=x.csv"},
              2);
}

TEST(JobConfigTest, KeysWithoutEffectListsTheSetKeysOfEachFeatureThatIsOff) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[checkpoint]\nenable = false\ninterval = 10\nkeep_latest_k = 3\n"
      "[validation]\nenable = false\nfreq = 5\n"
      "[profiling]\nprofiler_warmup = 1\nprofile_freq = 5\n"
      "[activation_checkpoint]\nmode = \"none\"\nselective_ac_option = \"op\"\n"
      "[metrics]\nsave_tb_folder = \"events\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(
      KeysWithoutEffect(*config),
      testing::ElementsAre(
          "[checkpoint] enable = false: interval, keep_latest_k have no effect",
          "[validation] enable = false: freq has no effect",
          "[profiling] enable_profiling = false: profiler_warmup has no effect",
          "[profiling] enable_profiling = false and enable_memory_snapshot = false: profile_freq "
          "has no effect",
          "[activation_checkpoint] mode is not \"selective\": selective_ac_option has no effect",
          "[metrics] enable_tensorboard = false: save_tb_folder has no effect"));
  // With the features on, the same keys take effect.
  config->mutable_checkpoint()->set_enable(true);
  config->mutable_validation()->set_enable(true);
  config->mutable_profiling()->set_enable_memory_snapshot(true);
  config->mutable_activation_checkpoint()->set_mode("selective");
  config->mutable_metrics()->set_enable_tensorboard(true);
  EXPECT_THAT(
      KeysWithoutEffect(*config),
      testing::ElementsAre("[profiling] enable_profiling = false: profiler_warmup has no effect"));
  EXPECT_TRUE(KeysWithoutEffect(DefaultJobConfig()).empty());
}

TEST(JobConfigTest, KeysWithoutEffectSaysAProfilingCycleThatNoStepEnds) {
  // The first trace is saved after step profile_freq: a shorter run writes none.
  absl::StatusOr<JobConfig> config = ParseText(
      "[training]\nsteps = 30\n[profiling]\nenable_profiling = true\nprofile_freq = 100\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(KeysWithoutEffect(*config),
              testing::ElementsAre("[profiling] profile_freq = 100 exceeds [training] steps = 30 "
                                   "(no cycle ends: no trace or snapshot is written): "
                                   "enable_profiling has no effect"));
  // A run that reaches step profile_freq saves its trace there.
  config->mutable_profiling()->set_profile_freq(30);
  EXPECT_TRUE(KeysWithoutEffect(*config).empty());
}

TEST(JobConfigTest, ProfilingWithoutEffectAfterResumeLooksAtTheStepsLeft) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[training]\nsteps = 15\n[profiling]\nenable_memory_snapshot = true\nprofile_freq = 10\n");
  ASSERT_TRUE(config.ok()) << config.status();
  // From step 1 a cycle ends at step 10; resumed at 10 (or later), steps 11 to 15 end none.
  EXPECT_TRUE(KeysWithoutEffect(*config).empty());
  EXPECT_EQ(ProfilingWithoutEffectAfterResume(*config, 10),
            "[profiling] profile_freq = 10 has no multiple in steps 11 to 15, which this run "
            "trains after resuming step 10 (no cycle ends: no trace or snapshot is written): "
            "enable_memory_snapshot has no effect");
  EXPECT_TRUE(ProfilingWithoutEffectAfterResume(*config, 14).has_value());
  // Resumed before step 10, the run reaches it; at step 15, nothing is left to train; at 0 (a
  // fresh run, or train_state excluded) KeysWithoutEffect has judged already.
  for (int64_t resumed : {0, 3, 9, 15, 20}) {
    EXPECT_EQ(ProfilingWithoutEffectAfterResume(*config, resumed), std::nullopt) << resumed;
  }
  // profile_freq past [training] steps: KeysWithoutEffect says it once, this not again.
  config->mutable_profiling()->set_profile_freq(20);
  ASSERT_EQ(KeysWithoutEffect(*config).size(), 1);
  EXPECT_EQ(ProfilingWithoutEffectAfterResume(*config, 10), std::nullopt);
  // Profiling off: nothing to say.
  config->mutable_profiling()->set_profile_freq(10);
  config->mutable_profiling()->set_enable_memory_snapshot(false);
  EXPECT_EQ(ProfilingWithoutEffectAfterResume(*config, 10), std::nullopt);
}

TEST(JobConfigTest, KeysWithoutEffectListsTheDecayKeysOfAScheduleWithoutDecay) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[lr_scheduler]\ndecay_ratio = 0.0\ndecay_type = \"cosine\"\nmin_lr_factor = 0.1\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(KeysWithoutEffect(*config),
              testing::ElementsAre("[lr_scheduler] decay_ratio = 0 (no decay phase): decay_type, "
                                   "min_lr_factor have no effect"));
  // The bundled RL jobs' constant schedule, with the decay keys left at their defaults: nothing.
  config->mutable_lr_scheduler()->set_decay_type("linear");
  config->mutable_lr_scheduler()->set_min_lr_factor(0);
  EXPECT_TRUE(KeysWithoutEffect(*config).empty());
  config->mutable_lr_scheduler()->set_decay_type("sqrt");
  config->mutable_lr_scheduler()->set_decay_ratio(0.5);
  EXPECT_TRUE(KeysWithoutEffect(*config).empty());
}

TEST(JobConfigTest, KeysWithoutEffectListsParallelismKeysOfDegreesThatAreOne) {
  absl::StatusOr<JobConfig> config = ParseText(
      "[parallelism]\npipeline_parallel_schedule = \"GPipe\"\n"
      "pipeline_parallel_microbatch_size = 3\npipeline_parallel_last_stage_less_layers = 0\n"
      "disable_loss_parallel = true\ncontext_parallel_rotate_method = \"alltoall\"\n"
      "fsdp_reshard_after_forward = \"never\"\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(KeysWithoutEffect(*config),
              testing::ElementsAre(
                  "[parallelism] pipeline_parallel_degree = 1: pipeline_parallel_schedule, "
                  "pipeline_parallel_microbatch_size, pipeline_parallel_last_stage_less_layers "
                  "have no effect",
                  "[parallelism] tensor_parallel_degree = 1: disable_loss_parallel has no effect",
                  "[parallelism] context_parallel_degree = 1: context_parallel_rotate_method has "
                  "no effect",
                  "[parallelism] data_parallel_shard_degree × context_parallel_degree = 1 (no "
                  "FSDP): fsdp_reshard_after_forward has no effect"));
  // titan_rl's FSDP key, named with its section.
  config->mutable_rl()->set_gather_for_generation(false);
  EXPECT_THAT(
      KeysWithoutEffect(*config),
      testing::Contains("[parallelism] data_parallel_shard_degree × context_parallel_degree "
                        "= 1 (no FSDP): [rl] gather_for_generation has no effect"));
  EXPECT_THAT(KeysWithoutEffect(*config, 2),
              testing::Not(testing::Contains(testing::HasSubstr("gather_for_generation"))));
  // data_parallel_shard_degree = -1 takes the 2 ranks: FSDP runs.
  EXPECT_THAT(KeysWithoutEffect(*config, 2),
              testing::Not(testing::Contains(testing::HasSubstr("fsdp_reshard_after_forward"))));
  // Context parallelism runs FSDP too, at data_parallel_shard_degree 1.
  config->mutable_parallelism()->set_pipeline_parallel_degree(2);
  config->mutable_parallelism()->set_tensor_parallel_degree(2);
  config->mutable_parallelism()->set_context_parallel_degree(2);
  config->mutable_parallelism()->set_data_parallel_shard_degree(1);
  EXPECT_TRUE(KeysWithoutEffect(*config, 8).empty());
}

TEST(JobConfigTest, SplitPointsRefuseTheKeysThatSizeStages) {
  for (const std::string key :
       {"pipeline_parallel_layers_per_stage=2", "pipeline_parallel_first_stage_less_layers=4",
        "pipeline_parallel_last_stage_less_layers=0"}) {
    EXPECT_EQ(ValidationError(
                  {"--parallelism.pipeline_parallel_degree=2",
                   "--parallelism.pipeline_parallel_split_points=layers.1", "--parallelism." + key},
                  2),
              "--parallelism.pipeline_parallel_split_points: [parallelism] "
              "pipeline_parallel_split_points and " +
                  key.substr(0, key.find('=')) + " both set; set one");
  }
  // Their defaults, written out, are no conflict.
  ExpectValid({"--parallelism.pipeline_parallel_degree=2",
               "--parallelism.pipeline_parallel_split_points=layers.1",
               "--parallelism.pipeline_parallel_first_stage_less_layers=1",
               "--parallelism.pipeline_parallel_layers_per_stage=-1"},
              2);
}

TEST(JobConfigTest, ChangedKeysListsOnlyValuesOtherThanTheDefaults) {
  // Written out whole (as config.toml is), a section at its defaults has no changed key.
  absl::StatusOr<JobConfig> dumped =
      ParseText(JobConfigToToml(DefaultJobConfig()), {"--training.steps=3"});
  ASSERT_TRUE(dumped.ok()) << dumped.status();
  EXPECT_TRUE(ChangedKeys(*dumped, "rl").empty());
  EXPECT_EQ(ChangedKeys(*dumped, "training"), std::vector<std::string>{"[training] steps = 3"});
  absl::StatusOr<JobConfig> changed = ParseText("[rl]\nalgorithm = \"ppo\"\nkl_coef = 0.05\n");
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(ChangedKeys(*changed, "rl"), std::vector<std::string>{"[rl] algorithm = \"ppo\""});
}

TEST(JobConfigTest, FolderKeysJoinTheDumpFolderAsOsPathJoin) {
  absl::StatusOr<JobConfig> config = ParseText("", {"--job.dump_folder=out/run"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(UnderDumpFolder(*config, "checkpoint"), "out/run/checkpoint");
  EXPECT_EQ(UnderDumpFolder(*config, "a/tb"), "out/run/a/tb");
  EXPECT_EQ(UnderDumpFolder(*config, "/abs/ck"), "/abs/ck");
}

TEST(JobConfigTest, FolderKeysThatAreTheDumpFolderItselfAreRefused) {
  for (const char* folder : {"", ".", "./", "../run/", "/abs/run"}) {
    EXPECT_EQ(ValidationError(
                  {"--job.dump_folder=/abs/run", absl::StrCat("--checkpoint.folder=", folder)}),
              absl::StrCat("[checkpoint] folder = \"", folder,
                           "\" is [job] dump_folder itself: checkpoints need a folder of their own "
                           "(its lock, its step-N folders); use a subfolder, e.g. \"checkpoint\" "
                           "(the default)"));
  }
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_TRUE(absl::StartsWith(
      ValidationError({"--job.dump_folder=./outputs/", "--checkpoint.folder=" + cwd + "/outputs"}),
      "[checkpoint] folder = "));
  EXPECT_EQ(ValidationError({"--comm.save_traces_folder="}),
            "[comm] save_traces_folder = \"\" is [job] dump_folder itself: the flight-recorder "
            "dumps (rank_<r> files) need a folder of their own ([metrics] save_for_all_ranks "
            "writes rank_<r> folders there); use a subfolder, e.g. \"comm_traces\" (the default)");
  ExpectValid({"--checkpoint.folder=./ck", "--comm.save_traces_folder=/abs/traces"});
  // Their files keep names of their own (events.out.tfevents.*, iteration_N/rank<r>_*).
  ExpectValid({"--metrics.save_tb_folder=", "--profiling.save_traces_folder=.",
               "--profiling.save_memory_snapshot_folder="});
}

TEST(JobConfigTest, OutputFoldersMustBeApartAndOutsideTheCheckpointFolder) {
  // A resume would read the TensorBoard folder as a damaged checkpoint step.
  const std::vector<std::string> tb_in_checkpoint = {"--checkpoint.enable",
                                                     "--metrics.enable_tensorboard",
                                                     "--metrics.save_tb_folder=checkpoint/step-2"};
  EXPECT_EQ(ValidationError(tb_in_checkpoint),
            "[metrics] save_tb_folder = \"checkpoint/step-2\" is inside [checkpoint] folder = "
            "\"checkpoint\" (its step-N folders are read as checkpoints); use a folder outside it");
  // Only folders of features that are on.
  ExpectValid({"--metrics.enable_tensorboard", "--metrics.save_tb_folder=checkpoint/step-2"});
  ExpectValid({"--checkpoint.enable", "--metrics.save_tb_folder=checkpoint/step-2"});
  // Compared as folders: spellings agree, a shared prefix of names does not.
  EXPECT_EQ(ValidationError({"--job.dump_folder=/abs/run", "--checkpoint.enable",
                             "--checkpoint.folder=/abs/run/ck", "--profiling.enable_profiling",
                             "--profiling.save_traces_folder=./ck/../ck/"}),
            "[profiling] save_traces_folder = \"./ck/../ck/\" is the folder of [checkpoint] "
            "folder = \"/abs/run/ck\" too; give each a folder of its own");
  ExpectValid({"--checkpoint.enable", "--metrics.enable_tensorboard",
               "--metrics.save_tb_folder=checkpoint_tb"});
  // Outputs whose files are named apart may share a folder.
  ExpectValid({"--profiling.enable_profiling", "--profiling.enable_memory_snapshot",
               "--profiling.save_memory_snapshot_folder=profile_traces/"});
  ExpectValid({"--metrics.enable_tensorboard", "--metrics.save_tb_folder=fr",
               "--comm.save_traces_folder=fr"});
  // The flight recorder's folder is always in use.
  EXPECT_EQ(ValidationError({"--checkpoint.enable", "--comm.save_traces_folder=checkpoint/fr"}),
            "[comm] save_traces_folder = \"checkpoint/fr\" is inside [checkpoint] folder = "
            "\"checkpoint\" (its step-N folders are read as checkpoints); use a folder outside it");
  // Every rank's TensorBoard folder rank_<r> would take the name of its flight-recorder dump.
  EXPECT_EQ(ValidationError({"--metrics.enable_tensorboard", "--metrics.save_tb_folder=fr",
                             "--metrics.save_for_all_ranks", "--comm.save_traces_folder=fr"}),
            "[comm] save_traces_folder = \"fr\" is the folder of [metrics] save_tb_folder = "
            "\"fr\" too; give each a folder of its own");
  // titan_rl's PPO saves its critic beside the policy's checkpoints.
  const std::vector<std::string> tb_in_critic = {"--checkpoint.enable",
                                                 "--metrics.enable_tensorboard",
                                                 "--metrics.save_tb_folder=checkpoint_critic/tb"};
  ExpectValid(tb_in_critic);
  std::vector<std::string> ppo = tb_in_critic;
  ppo.push_back("--rl.algorithm=ppo");
  EXPECT_EQ(ValidationError(ppo),
            "[metrics] save_tb_folder = \"checkpoint_critic/tb\" is inside PPO's critic "
            "checkpoints, [checkpoint] folder + \"_critic\" = \"checkpoint_critic\" (its step-N "
            "folders are read as checkpoints); use a folder outside it");
  ExpectValid({"--checkpoint.enable", "--checkpoint.folder=ck/", "--rl.algorithm=ppo"});
  // A trailing '/' still puts the critic beside the policy's folder, not inside it.
  std::vector<std::string> slash = ppo;
  slash.push_back("--checkpoint.folder=checkpoint/");
  EXPECT_EQ(ValidationError(slash),
            "[metrics] save_tb_folder = \"checkpoint_critic/tb\" is inside PPO's critic "
            "checkpoints, [checkpoint] folder + \"_critic\" = \"checkpoint_critic\" (its step-N "
            "folders are read as checkpoints); use a folder outside it");
}

TEST(JobConfigTest, CriticCheckpointFolderIsBesideThePolicys) {
  EXPECT_EQ(CriticCheckpointFolder("checkpoint"), "checkpoint_critic");
  EXPECT_EQ(CriticCheckpointFolder("checkpoint/"), "checkpoint_critic");
  EXPECT_EQ(CriticCheckpointFolder("/runs/ck//"), "/runs/ck_critic");
  EXPECT_EQ(CriticCheckpointFolder("ck/."), "ck_critic");
  EXPECT_EQ(CriticCheckpointFolder("ck/./"), "ck_critic");
  EXPECT_EQ(CriticCheckpointFolder("ck."), "ck._critic");
}

TEST(JobConfigTest, ParallelDegreesMustMultiplyToWorldSize) {
  EXPECT_EQ(ValidationError({"--parallelism.data_parallel_shard_degree=8",
                             "--parallelism.tensor_parallel_degree=2"},
                            8),
            "[parallelism] data_parallel_replicate_degree=1 × tensor_parallel_degree=2 × "
            "pipeline_parallel_degree=1 × context_parallel_degree=1 × "
            "data_parallel_shard_degree=8 = 16, but the world size is 8");
  EXPECT_EQ(ValidationError({"--parallelism.tensor_parallel_degree=3"}, 8),
            "[parallelism] world size 8 is not divisible by data_parallel_replicate_degree=1 × "
            "tensor_parallel_degree=3 × pipeline_parallel_degree=1 × context_parallel_degree=1 = "
            "3, so data_parallel_shard_degree=-1 cannot be inferred");
  EXPECT_EQ(ValidationError({"--parallelism.data_parallel_shard_degree=0"}, 8),
            "--parallelism.data_parallel_shard_degree: [parallelism] data_parallel_shard_degree=0 "
            "is out of range: expected -1 or >= 1");
  // 4D: the inferred shard degree fills the rest (16 / (2 x 2 x 2) = 2).
  ExpectValid({"--parallelism.data_parallel_replicate_degree=2",
               "--parallelism.pipeline_parallel_degree=2", "--parallelism.tensor_parallel_degree=2"},
              16);
  EXPECT_EQ(ValidationError({"--parallelism.pipeline_parallel_degree=2",
                             "--parallelism.pipeline_parallel_microbatch_size=3"},
                            2),
            "[parallelism] pipeline_parallel_microbatch_size=3 does not divide [training] "
            "local_batch_size=8");
  EXPECT_EQ(ValidationError({"--parallelism.expert_parallel_degree=4"}, 8),
            "--parallelism.expert_parallel_degree: [parallelism] expert_parallel_degree = 4: "
            "expert parallelism needs a "
            "mixture-of-experts family; none is registered yet");
  // No layout makes it run, so the missing family is the reason given, not more ranks.
  for (int world_size : {1, 8}) {
    EXPECT_EQ(ValidationError({"--parallelism.expert_parallel_degree=3"}, world_size),
              "--parallelism.expert_parallel_degree: [parallelism] expert_parallel_degree = 3: "
              "expert parallelism needs a "
              "mixture-of-experts family; none is registered yet");
  }
  EXPECT_EQ(ValidateJobConfig(DefaultJobConfig(), 0).message(), "world size must be >= 1, got 0");
}

TEST(JobConfigTest, SequencesMustSplitOverContextAndSequenceParallelRanks) {
  ExpectValid({"--parallelism.context_parallel_degree=4", "--training.seq_len=64"}, 4);
  EXPECT_EQ(ValidationError({"--parallelism.context_parallel_degree=4", "--training.seq_len=68"}, 4),
            "[training] seq_len=68 is not divisible by 2 × [parallelism] context_parallel_degree=4 "
            "(context_parallel_load_balancer=headtail cuts each sequence into 2 × degree chunks)");
  ExpectValid({"--parallelism.context_parallel_degree=4", "--training.seq_len=68",
               "--parallelism.context_parallel_load_balancer=none"},
              4);
  EXPECT_EQ(ValidationError({"--parallelism.context_parallel_degree=2", "--training.seq_len=64",
                             "--validation.enable", "--validation.seq_len=66"},
                            2),
            "[validation] seq_len=66 is not divisible by 2 × [parallelism] "
            "context_parallel_degree=2 (context_parallel_load_balancer=headtail cuts each sequence "
            "into 2 × degree chunks)");
  EXPECT_EQ(ValidationError({"--parallelism.context_parallel_degree=2",
                             "--parallelism.tensor_parallel_degree=4", "--training.seq_len=20"},
                            8),
            "[training] seq_len=20 / [parallelism] context_parallel_degree=2 is not divisible by "
            "[parallelism] tensor_parallel_degree=4 (enable_sequence_parallel splits each rank's "
            "tokens; set it to false or change seq_len)");
  EXPECT_EQ(ValidationError({"--parallelism.tensor_parallel_degree=3", "--training.seq_len=64"}, 3),
            "[training] seq_len=64 is not divisible by [parallelism] tensor_parallel_degree=3 "
            "(enable_sequence_parallel splits each rank's tokens; set it to false or change "
            "seq_len)");
  ExpectValid({"--parallelism.context_parallel_degree=2", "--parallelism.tensor_parallel_degree=4",
               "--training.seq_len=20", "--parallelism.enable_sequence_parallel=false"},
              8);
}

TEST(JobConfigTest, ShippedConfigsParseAndValidate) {
  // Each shipped job with the world size it is written for.
  const std::map<std::string, int> world_sizes = {
      {"llama3_debugmodel.toml", 1},
      {"llama3_8b.toml", 64},
      {"llama3_70b.toml", 64},
      {"llama3_405b.toml", 128},
      {"qwen3_0.6b.toml", 8},
      {"rl_sft_sorting.toml", 1},
      {"rl_grpo_sorting.toml", 1},
      {"rl_ppo_sorting.toml", 1},
      {"rl_dpo_sorting.toml", 1},
  };
  std::map<std::string, int> found;
  for (const auto& entry : std::filesystem::directory_iterator("configs")) {
    if (entry.path().extension() != ".toml") continue;
    const std::string name = entry.path().filename().string();
    ASSERT_TRUE(world_sizes.count(name)) << name << ": add it to this test with its world size";
    found[name] = world_sizes.at(name);
    absl::StatusOr<JobConfig> config = ParseJobConfig(entry.path().string(), {});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_TRUE(ValidateJobConfig(*config, world_sizes.at(name)).ok())
        << name << ": " << ValidateJobConfig(*config, world_sizes.at(name));
  }
  EXPECT_EQ(found, world_sizes);

  absl::StatusOr<JobConfig> debug = ParseJobConfig("configs/llama3_debugmodel.toml", {});
  ASSERT_TRUE(debug.ok()) << debug.status();
  EXPECT_EQ(debug->model().flavor(), "debugmodel");
  EXPECT_EQ(debug->training().seq_len(), 128);
  EXPECT_EQ(debug->training().local_batch_size(), 8);
  EXPECT_EQ(debug->training().steps(), 30);
  EXPECT_EQ(debug->training().mixed_precision_param(), "float32");
  EXPECT_EQ(debug->metrics().log_freq(), 1);
  EXPECT_TRUE(debug->metrics().enable_tensorboard());
  EXPECT_TRUE(debug->checkpoint().enable());
  EXPECT_EQ(debug->checkpoint().interval(), 10);
  EXPECT_EQ(debug->checkpoint().keep_latest_k(), 3);
  EXPECT_EQ(debug->activation_checkpoint().mode(), "none");
  EXPECT_TRUE(debug->validation().enable());
  EXPECT_EQ(debug->validation().steps(), 4);
  EXPECT_EQ(debug->job().dump_folder(), "./outputs/llama3_debugmodel");
}

TEST(JobConfigTest, HelpListsEveryKeyWithTypeDefaultAndOldNames) {
  const std::string help = JobConfigHelp();
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    EXPECT_TRUE(absl::StrContains(help, absl::StrCat("[", section->name(), "]  ")))
        << section->name();
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      EXPECT_TRUE(
          absl::StrContains(help, absl::StrCat("--", section->name(), ".", field->name(), "  (")))
          << field->full_name();
      EXPECT_TRUE(absl::StrContains(help, field->options().GetExtension(titan::help)))
          << field->full_name();
    }
  }
  EXPECT_TRUE(absl::StrContains(help, "--training.steps  (integer, default 10000)"));
  EXPECT_TRUE(absl::StrContains(help, "--optimizer.lr  (float, default 8e-04)"));
  EXPECT_TRUE(absl::StrContains(
      help, "--compile.components  (list of strings, default [\"model\", \"loss\"])"));
  EXPECT_TRUE(absl::StrContains(help, "old name: --job.print_freq ([job] print_freq)"));
  EXPECT_TRUE(absl::StrContains(help, "old name: --checkpoint.enable_checkpoint"));
  EXPECT_TRUE(absl::StrContains(help, "old name: --lr_scheduler.lr_min ([lr_scheduler] lr_min)"));
  EXPECT_TRUE(absl::StrContains(help, "also read as [quantize.linear.float8]"));
  EXPECT_TRUE(absl::StrContains(help, "also: \"quantize.linear.float8\" for \"float8\""));
  EXPECT_TRUE(absl::StrContains(help, "one of: \"linear\", \"sqrt\", \"cosine\""));
  EXPECT_TRUE(absl::StrContains(help, "range: -1 or a value in [0, 1]"));
  // What LrScheduler does with a warmup longer than the run.
  EXPECT_TRUE(absl::StrContains(help, "more than training.steps is shortened to training.steps"));
  EXPECT_TRUE(absl::StrContains(help, "--optimizer.param_groups  (list of tables, default [])"));
  const FieldDescriptor* groups =
      JobConfig::Optimizer::descriptor()->FindFieldByName("param_groups");
  for (int k = 0; k < groups->message_type()->field_count(); ++k) {
    const FieldDescriptor* key = groups->message_type()->field(k);
    EXPECT_TRUE(absl::StrContains(help, absl::StrCat("\n        ", key->name(), "  (")))
        << key->full_name();
    EXPECT_TRUE(absl::StrContains(
        help, absl::StrCat(")\n            ", key->options().GetExtension(titan::help), "\n")))
        << key->full_name();
  }
  EXPECT_TRUE(absl::StrContains(help, "        betas  (list of floats)\n"));
}

TEST(JobConfigTest, TomlDumpRoundTrips) {
  absl::StatusOr<JobConfig> config = ParseJobConfig(
      "configs/llama3_debugmodel.toml",
      {"--job.description=quotes \" backslash \\ tab \t newline \n unicode × end",
       "--optimizer.eps=1e-12", "--optimizer.beta1=0.1", "--lr_scheduler.min_lr_factor=0.3",
       "--model.converters=float8,x y", "--training.max_norm=1e300",
       "--optimizer.param_groups=[{pattern = '\\.bias$|\"q\"', weight_decay = 0}, {pattern = "
       "\"emb\", lr = 1e-4, betas = [0.5, 0.25], eps = 1e-30}, {pattern = \"x\"}]"});
  ASSERT_TRUE(config.ok()) << config.status();
  for (bool with_monitor : {false, true}) {
    if (with_monitor) config->mutable_job()->set_monitoring_interval(5);
    const std::string toml = JobConfigToToml(*config);
    absl::StatusOr<JobConfig> reparsed = ParseJobConfigText(toml, "dump.toml", {});
    ASSERT_TRUE(reparsed.ok()) << reparsed.status() << "\n" << toml;
    // config_file is a comment in the dump (only the command line sets it).
    reparsed->mutable_job()->set_config_file(config->job().config_file());
    // The dump writes every key, so presence differs; values must not.
    EXPECT_TRUE(MessageDifferencer::Equivalent(*reparsed, *config)) << toml;
    // A table's keys keep their presence: an unset one means "take [optimizer]'s value".
    ASSERT_EQ(reparsed->optimizer().param_groups_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(MessageDifferencer::Equals(reparsed->optimizer().param_groups(i),
                                             config->optimizer().param_groups(i)))
          << toml;
    }
    EXPECT_EQ(JobConfigToToml(*reparsed), toml);
    EXPECT_TRUE(absl::StrContains(toml, with_monitor ? "monitoring_interval = 5" : "monitoring_interval = 0"));
  }
  EXPECT_TRUE(absl::StrContains(JobConfigToToml(*config), "lr = 0.002\n"));
  EXPECT_TRUE(absl::StrContains(
      JobConfigToToml(*config),
      "param_groups = [{pattern = \"\\\\.bias$|\\\"q\\\"\", weight_decay = 0.0}, {pattern = "
      "\"emb\", lr = 1e-04, betas = [0.5, 0.25], eps = 1e-30}, {pattern = \"x\"}]\n"))
      << JobConfigToToml(*config);
}

TEST(JobConfigTest, KeysChangedSinceAnEarlierRunsConfig) {
  JobConfig earlier = DefaultJobConfig();
  earlier.mutable_optimizer()->set_lr(3e-4);
  earlier.mutable_training()->set_steps(30);
  JobConfig now = earlier;
  now.mutable_optimizer()->set_lr(1e-4);
  now.mutable_training()->set_steps(60);
  EXPECT_EQ(
      KeysChangedSince(JobConfigToToml(earlier), now),
      (std::vector<std::string>{"[optimizer] lr = 3e-04 -> 1e-04", "[training] steps = 30 -> 60"}));
  EXPECT_TRUE(KeysChangedSince(JobConfigToToml(now), now).empty());
  // A key the earlier config lacks (another titan's schema) is not a change.
  const std::string without_lr =
      absl::StrReplaceAll(JobConfigToToml(earlier), {{"\nlr = 3e-04\n", "\n"}});
  EXPECT_EQ(KeysChangedSince(without_lr, now),
            (std::vector<std::string>{"[training] steps = 30 -> 60"}));
  // A rotated credential in a scorer's URL is said to change, never printed.
  JobConfig scored = now;
  scored.mutable_rl()->set_reward_command("score --url http://alice:old@host/x");
  JobConfig rotated = scored;
  rotated.mutable_rl()->set_reward_command("score --url http://alice:new@host/x");
  EXPECT_EQ(KeysChangedSince(JobConfigToToml(scored), rotated),
            (std::vector<std::string>{"[rl] reward_command = \"score --url http://***@host/x\" -> "
                                      "\"score --url http://***@host/x\""}));
  // So is a secret-named value in it.
  scored.mutable_rl()->set_reward_command("API_KEY=sk-old-0123 python score.py");
  rotated.mutable_rl()->set_reward_command("API_KEY=sk-new-4567 python score.py");
  EXPECT_EQ(KeysChangedSince(JobConfigToToml(scored), rotated),
            (std::vector<std::string>{"[rl] reward_command = \"API_KEY=*** python score.py\" -> "
                                      "\"API_KEY=*** python score.py\""}));
}

// [job] print_config's text masks what config.toml keeps to run again.
TEST(JobConfigTest, PrintedTomlMasksSecrets) {
  JobConfig config = DefaultJobConfig();
  config.mutable_rl()->set_reward_command(
      "OPENAI_API_KEY=sk-live-0123 python score.py --url http://u:pw@host/x");
  EXPECT_TRUE(absl::StrContains(JobConfigToToml(config), "sk-live-0123"));
  const std::string printed = JobConfigToPrintedToml(config);
  EXPECT_TRUE(absl::StrContains(
      printed, "reward_command = \"OPENAI_API_KEY=*** python score.py --url http://***@host/x\"\n"))
      << printed;
  EXPECT_FALSE(absl::StrContains(printed, "sk-live-0123"));
  EXPECT_FALSE(absl::StrContains(printed, "pw@"));
}

// torchtitan's current names for keys titan keeps under their older sections, and its W&B switch
// at its default: a torchtitan job file's lines parse.
TEST(JobConfigTest, TorchtitansCurrentNamesAreAccepted) {
  absl::StatusOr<JobConfig> config = ParseJobConfigText(
      "[metrics]\nenable_wandb = false\n[debug]\nseed = 7\ndeterministic = true\n"
      "[parallelism]\nenable_async_tensor_parallel = false\n",
      "configs/x.toml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->training().seed(), 7);
  EXPECT_TRUE(config->training().deterministic());
  absl::StatusOr<JobConfig> wandb =
      ParseJobConfigText("[metrics]\nenable_wandb = true\n", "configs/x.toml", {});
  ASSERT_TRUE(wandb.ok()) << wandb.status();
  EXPECT_TRUE(absl::StrContains(ValidateJobConfig(*wandb).message(),
                                "[metrics] enable_wandb = true: titan has no Weights & Biases "
                                "logger"))
      << ValidateJobConfig(*wandb);
}

}  // namespace
}  // namespace titan
