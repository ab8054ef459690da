#include "lib/train/components.h"

#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/data/packed_text_dataset.h"
#include "lib/float8/float8_converter.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/load_weights.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/metrics/step_log.h"
#include "lib/model/batch_invariant.h"
#include "lib/model/bf16_weight_copies.h"
#include "lib/parallel/tensor_parallel.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "lib/train/device.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kBundledTokenizer[] = "assets/default_tokenizer";
constexpr char kFromCheckpoint[] = "from_checkpoint";

}  // namespace

absl::StatusOr<std::string> InitialLoadPath(const JobConfig& config) {
  const auto& ckpt = config.checkpoint();
  const bool from_assets = ckpt.initial_load_path().empty();
  const std::string path = !from_assets                ? ckpt.initial_load_path()
                           : ckpt.initial_load_in_hf() ? config.model().hf_assets_path()
                                                       : "";
  if (path.empty()) return path;
  const std::string key = from_assets ? "[model] hf_assets_path" : "[checkpoint] initial_load_path";
  if (!PathExists(path)) {
    return absl::NotFoundError(absl::StrCat(key, ": ", path, ": no such file or directory"));
  }
  absl::StatusOr<CheckpointFormat> format =
      DetectInitialLoadFormat(path, ckpt.initial_load_in_hf());
  TITAN_RETURN_IF_ERROR(WithContext(format.status(), key));
  if ((*format == CheckpointFormat::kHf) != ckpt.initial_load_in_hf()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": ", path, " holds a ",
        *format == CheckpointFormat::kHf     ? "Hugging Face"
        : *format == CheckpointFormat::kMeta ? "Meta"
                                             : "titan",
        " checkpoint, but [checkpoint] initial_load_in_hf = ",
        ckpt.initial_load_in_hf() ? "true" : "false", " reads ",
        ckpt.initial_load_in_hf() ? "Hugging Face safetensors" : "titan or Meta checkpoints",
        ": set it to ", ckpt.initial_load_in_hf() ? "false" : "true"));
  }
  return path;
}

namespace {

// Fills what `source` says of its model beyond the architecture (special ids, generation config)
// where `info` says nothing yet.
void AdoptUnsetModelDetails(const ModelInfo& source, ModelInfo& info) {
  for (auto [from, to] : {std::pair(&source.bos_token_id, &info.bos_token_id),
                          std::pair(&source.eos_token_id, &info.eos_token_id),
                          std::pair(&source.pad_token_id, &info.pad_token_id),
                          std::pair(&source.hf_generation_config, &info.hf_generation_config)}) {
    if (to->is_null()) *to = *from;
  }
}

// [model] hf_assets_path (its tokenizer, perhaps its weights) and the initial load must, where
// they describe their model, describe the architecture and vocab of `info` (a named flavor's, or
// with `shape_from` = "key: path" the "from_checkpoint" source's, which is not checked against
// itself): loading compares parameter shapes only, which rope_theta, norm_eps or RoPE scaling
// leave alike, and assets of another model would pair it with a foreign tokenizer. What shapes do
// not say (special ids, generation config) the model takes from the first of them that says it.
// A resumed step (`resume_dir`) stands in for the initial load: the details it recorded are the
// ones its run adopted, and TrainCheckpointer compares its architecture with the run's.
absl::Status CheckAndAdoptFlavorSources(const JobConfig& config, ModelInfo& info,
                                        const std::string& resume_dir,
                                        const std::string& shape_from = "") {
  struct Source {
    std::string key, path;
    bool in_hf;
    bool checked = true;
  };
  std::vector<Source> sources;
  const std::string& assets = config.model().hf_assets_path();
  if (!assets.empty()) {
    if (!IsDirectory(assets)) {
      return absl::NotFoundError(
          absl::StrCat("[model] hf_assets_path: ", assets, ": no such folder"));
    }
    // A folder without config.json (a tokenizer's) describes no architecture to check.
    if (PathExists(assets + "/config.json")) {
      sources.push_back({"[model] hf_assets_path", assets, /*in_hf=*/true});
    } else {
      info.hf_generation_config = ReadHfGenerationConfig(assets);
    }
  }
  if (!resume_dir.empty()) {
    sources.push_back({"[checkpoint] folder", resume_dir, /*in_hf=*/false, /*checked=*/false});
  } else {
    TITAN_ASSIGN_OR_RETURN(const std::string initial_load, InitialLoadPath(config));
    if (!initial_load.empty() && initial_load != assets) {
      sources.push_back({"[checkpoint] initial_load_path", initial_load,
                         config.checkpoint().initial_load_in_hf()});
    }
  }
  for (const Source& source : sources) {
    if (shape_from == absl::StrCat(source.key, ": ", source.path)) continue;
    const absl::StatusOr<ModelInfo> described =
        DescribeCheckpointAt(source.path, source.in_hf, info.name());
    // An initial load that says nothing of its model is judged by its shapes when it loads.
    if (!described.ok() && source.key != "[model] hf_assets_path") continue;
    TITAN_RETURN_IF_ERROR(WithContext(described.status(), source.key));
    if (!source.checked) {
      AdoptUnsetModelDetails(*described, info);
      continue;
    }
    std::string differences = ArchitectureDifferences(described->args, info.args);
    if (described->args.vocab_size != info.args.vocab_size) {
      absl::StrAppend(&differences, differences.empty() ? "" : ", ", "vocab_size ",
                      described->args.vocab_size, " vs ", info.args.vocab_size);
    }
    if (!differences.empty() && !shape_from.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source.key, ": ", source.path, " holds ", DescribeArchitecture(described->args),
          ", but the model's shape (flavor = \"from_checkpoint\") comes from ", shape_from, ": ",
          DescribeArchitecture(info.args), " (", differences, "); point both at one model"));
    }
    if (!differences.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source.key, ": ", source.path, " holds ", DescribeArchitecture(described->args),
          ", but [model] flavor ", config.model().flavor(), " is ", DescribeArchitecture(info.args),
          " (", differences, "); use flavor = \"from_checkpoint\" to take the checkpoint's shape"));
    }
    AdoptUnsetModelDetails(*described, info);
  }
  return absl::OkStatus();
}

// This data-parallel rank's share of the windows of the documents at `path` (PackedTextDataset
// deals them out in rounds); the tensor, context and pipeline ranks of one data-parallel rank read
// the same.
TextDatasetOptions RankShare(const JobConfig& config, const RunSetup& setup,
                             const std::string& path, int64_t seq_len) {
  TextDatasetOptions data;
  data.path = path;
  data.text_field = config.training().dataset_text_field();
  data.seq_len = seq_len;
  data.dp_rank = setup.dp_rank;
  data.dp_world_size = setup.dp_size;
  return data;
}

}  // namespace

absl::Status ConfigureFusedKernels(const JobConfig& config) {
  std::vector<FusedKernel> disabled_kernels;
  for (const std::string& name : config.compile().disabled_kernels()) {
    TITAN_ASSIGN_OR_RETURN(const FusedKernel kernel, FusedKernelNamed(name));
    disabled_kernels.push_back(kernel);
  }
  SetFusedKernels(config.compile().fused_kernels(), disabled_kernels);
  // Without activation checkpointing forward's bf16 weights live until backward anyway: the
  // optimizer's copies of them (written in its kernel's pass) add no peak memory there. A CUDA
  // graph would read a copy without checking it is current.
  SetBf16WeightCopiesEnabled(FusedKernelEnabled(FusedKernel::kAdam) &&
                             FusedKernelEnabled(FusedKernel::kBf16WeightCopies) &&
                             config.activation_checkpoint().mode() == "none" &&
                             !config.compile().cuda_graph());
  return absl::OkStatus();
}

void LogJobStart(const JobConfig& config, const DistributedRuntime& runtime) {
  if (runtime.rank() != 0) return;
  LOG(INFO) << "job: " << config.job().description();
  if (config.job().print_config()) {
    LOG(INFO) << "effective configuration:\n" << JobConfigToPrintedToml(config);
  }
}

void WarnProfilingWithoutEffectAfterResume(const JobConfig& config,
                                           const DistributedRuntime& runtime,
                                           int64_t resumed_step) {
  if (runtime.rank() != 0) return;
  if (const std::optional<std::string> line =
          ProfilingWithoutEffectAfterResume(config, resumed_step)) {
    LOG(WARNING) << *line;
  }
}

absl::StatusOr<RunSetup> SetUpRun(const JobConfig& config, const DistributedRuntime& runtime) {
  RunSetup setup;
  if (runtime.distributed()) {
    setup.dp_rank = runtime.comm(MeshGroup::kDp).rank();
    setup.dp_size = runtime.comm(MeshGroup::kDp).size();
    // Ranks sharing a host split its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
    const int local = std::max(1, runtime.env().local_world_size);
    at::set_num_threads(std::max<int>(1, std::thread::hardware_concurrency() / local));
  }
  // Every rank initialises the same weights: a random seed is rank 0's. So is the run id.
  const auto& training = config.training();
  std::random_device random;
  at::Tensor seed_and_run = at::full({2}, training.seed(), at::kLong);
  if (training.seed() < 0) seed_and_run[0].fill_(static_cast<int64_t>(random() >> 1));
  seed_and_run[1].fill_((static_cast<int64_t>(random()) << 31) ^ random());
  if (runtime.distributed()) {
    TITAN_RETURN_IF_ERROR(Await(runtime.comm(MeshGroup::kWorld).Broadcast(seed_and_run, 0)));
  }
  setup.seed = seed_and_run[0].item<int64_t>();
  setup.run_id = absl::StrCat(seed_and_run[1].item<int64_t>());
  if (training.seed() < 0 && runtime.rank() == 0) {
    LOG(INFO) << "[training] seed = -1: drew seed " << setup.seed;
  }
  at::manual_seed(setup.seed);
  if (training.deterministic()) at::globalContext().setDeterministicAlgorithms(true, false);
  SetBatchInvariant(config.debug().batch_invariant());
  TITAN_RETURN_IF_ERROR(ConfigureFusedKernels(config));

  setup.device = PickDevice(runtime.env().local_rank);
  ConfigureCudaRuntime(setup.device, training.deterministic());
  const std::string& mp = training.mixed_precision_param();
  if (setup.device.is_cuda() && (mp == "bfloat16" || mp == "float16")) {
    setup.autocast_dtype = mp == "bfloat16" ? at::kBFloat16 : at::kHalf;
  }
  LOG(INFO) << "device " << DeviceName(setup.device) << ", compute dtype "
            << (setup.autocast_dtype ? mp : std::string("float32"))
            << (setup.device.is_cpu() && mp != "float32" ? " (mixed precision is GPU-only)" : "");
  return setup;
}

absl::Status MakeDumpFolder(const JobConfig& config) {
  return WithContext(MakeDirectories(config.job().dump_folder()), "[job] dump_folder");
}

void RemoveInterruptedWrites(const std::string& dump_folder) {
  const auto remove_in = [](const std::string& folder, const auto& owned) {
    absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
    if (!names.ok()) return;  // A new folder holds none.
    for (const std::string& name : *names) {
      const std::optional<absl::string_view> target = AtomicWriteTarget(name);
      if (!target.has_value() || !owned(*target)) continue;
      const std::string path = JoinPath(folder, name);
      LOG(WARNING) << "Removing " << path << " left by an interrupted write of "
                   << JoinPath(folder, *target);
      // Never read, a temporary that stays costs only disk.
      if (::unlink(path.c_str()) != 0) {
        const absl::Status failed = ErrnoError("unlink", path);
        LOG(WARNING) << "could not remove it, left in place: " << failed.message();
      }
    }
  };
  remove_in(dump_folder, [&](absl::string_view target) {
    return target == "config.toml" || target == "metrics.jsonl" || target == "rollouts.jsonl" ||
           RankInName(target, "rollouts_rank", ".jsonl").has_value();
  });
  for (const int r : RanksIn(dump_folder, "rank_", "")) {
    remove_in(absl::StrCat(dump_folder, "/rank_", r),
              [](absl::string_view target) { return target == "metrics.jsonl"; });
  }
}

absl::StatusOr<FolderLocks> LockRunFolders(const JobConfig& config,
                                           const DistributedRuntime& runtime) {
  FolderLocks locks;
  absl::Status locked;
  // A stop signal before training starts ends the run at once, leaving no folder it made.
  FolderLock::ReleaseOnStopSignals();
  if (runtime.rank() == 0) {
    // (key, folder) pairs.
    std::vector<std::pair<std::string, std::string>> folders = {
        {"[job] dump_folder", config.job().dump_folder()}};
    // Inside the dump folder too: another run may name this one's checkpoint folder as its own.
    if (config.checkpoint().enable()) {
      folders.emplace_back("[checkpoint] folder",
                           UnderDumpFolder(config, config.checkpoint().folder()));
    }
    // Another run writing there would interleave its points with this run's series.
    constexpr absl::string_view kTensorBoardKey = "[metrics] save_tb_folder";
    if (config.metrics().enable_tensorboard()) {
      folders.emplace_back(kTensorBoardKey,
                           UnderDumpFolder(config, config.metrics().save_tb_folder()));
    }
    std::vector<std::string> locked_keys;
    for (const auto& [key, folder] : folders) {
      absl::StatusOr<std::unique_ptr<FolderLock>> lock = FolderLock::Acquire(folder);
      // Event files have names of their own: the TensorBoard folder may be a folder locked above.
      if (absl::IsAlreadyExists(lock.status()) && key == kTensorBoardKey) continue;
      if (absl::IsAlreadyExists(lock.status())) {
        // Validation catches the spellings; a symlink to the dump folder ends up here.
        locked = absl::InvalidArgumentError(absl::StrCat(key, ": ", folder, " is the folder of ",
                                                         absl::StrJoin(locked_keys, " or "),
                                                         " too; give it a folder of its own"));
        break;
      }
      if (!lock.ok()) {
        locked = WithContext(lock.status(), key);
        break;
      }
      locks.Add(*std::move(lock));
      locked_keys.push_back(key);
    }
    // Before the other ranks (waiting below) write there: no temporary is in flight.
    if (locked.ok()) RemoveInterruptedWrites(config.job().dump_folder());
  }
  TITAN_ASSIGN_OR_RETURN(const bool all_locked, runtime.AllAgree(locked.ok()));
  TITAN_RETURN_IF_ERROR(locked);
  if (!all_locked) {
    return absl::FailedPreconditionError(
        "rank 0 could not lock the run's folders against another run (its log says why)");
  }
  // After rank 0's: its lock makes (and so may remove) the folder.
  if (runtime.rank() != 0) TITAN_RETURN_IF_ERROR(MakeDumpFolder(config));
  return locks;
}

std::string TokenizerPath(const JobConfig& config) {
  const auto& model = config.model();
  if (!model.tokenizer_path().empty()) return model.tokenizer_path();
  return !model.hf_assets_path().empty() ? model.hf_assets_path() : kBundledTokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildTokenizer(const JobConfig& config) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(TokenizerPath(config));
  if (tokenizer.ok()) return tokenizer;
  // The key TokenizerPath took the path from (unset: the bundled tokenizer, its default).
  return WithContext(tokenizer.status(), config.model().tokenizer_path().empty() &&
                                                 !config.model().hf_assets_path().empty()
                                             ? "[model] hf_assets_path"
                                             : "[model] tokenizer_path");
}

absl::StatusOr<ModelInfo> ResolveModel(const JobConfig& config, const Tokenizer& tokenizer,
                                       const std::string& resume_dir) {
  const auto& model = config.model();
  TITAN_ASSIGN_OR_RETURN(const ModelSpec* spec, FindModel(model.name()));
  ModelInfo info;
  if (model.flavor() == kFromCheckpoint) {
    // An assets folder may hold only the tokenizer (as torchtitan's often do): the initial
    // checkpoint's shape (or the resumed step's, which replaces it) is then read instead.
    const std::string assets_config = absl::StrCat(model.hf_assets_path(), "/config.json");
    const bool from_assets = !model.hf_assets_path().empty() && PathExists(assets_config);
    const bool from_resume = !from_assets && !resume_dir.empty();
    std::string path = from_assets ? model.hf_assets_path() : resume_dir;
    if (!from_assets && !from_resume) {
      TITAN_ASSIGN_OR_RETURN(path, InitialLoadPath(config));
    }
    if (path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[model] flavor = \"from_checkpoint\" needs [model] hf_assets_path (a folder with "
          "config.json",
          model.hf_assets_path().empty() ? "" : absl::StrCat(": there is no ", assets_config),
          ") or [checkpoint] initial_load_path to read the shape from"));
    }
    const bool in_hf = from_assets || (!from_resume && config.checkpoint().initial_load_in_hf());
    TITAN_ASSIGN_OR_RETURN(info, DescribeCheckpointAt(path, in_hf, spec->name));
    LOG(INFO) << "model shape from " << path << ": " << DescribeArchitecture(info.args);
    const char* key = from_assets   ? "[model] hf_assets_path"
                      : from_resume ? "[checkpoint] folder"
                                    : "[checkpoint] initial_load_path";
    TITAN_RETURN_IF_ERROR(
        CheckAndAdoptFlavorSources(config, info, resume_dir, absl::StrCat(key, ": ", path)));
  } else {
    TITAN_ASSIGN_OR_RETURN(TransformerArgs args, spec->Flavor(model.flavor()));
    if (args.vocab_size == 0) args.vocab_size = tokenizer.vocab_size();
    info = DescribeModel(*spec, args);
    info.flavor = model.flavor();
    TITAN_RETURN_IF_ERROR(CheckAndAdoptFlavorSources(config, info, resume_dir));
  }
  TITAN_RETURN_IF_ERROR(
      CheckTokenizerFitsModel(tokenizer.vocab_size(), info, "[model] tokenizer_path"));
  if (info.bos_token_id.is_null() && tokenizer.bos_id().has_value()) {
    info.bos_token_id = *tokenizer.bos_id();
  }
  if (info.eos_token_id.is_null()) info.eos_token_id = tokenizer.eos_id();
  return info;
}

namespace {

// The family-independent model converters ([model] converters), run on a (meta) model or pipeline
// stage before parallelize, as torchtitan's.
absl::Status ApplyModelConverters(const JobConfig& config, const RunSetup& setup,
                                  const DistributedRuntime& runtime, Decoder& model) {
  if (config.model().converters().empty()) return absl::OkStatus();
  const JobConfig::Float8& float8 = config.float8();
  Float8ConverterOptions options;
  TITAN_ASSIGN_OR_RETURN(options.linear.recipe, ParseFloat8Recipe(float8.recipe_name()));
  options.linear.emulate = float8.emulate();
  options.linear.keep_weight_cast = !runtime.dims().fsdp_enabled() && !runtime.dims().pp_enabled();
  options.filter_fqns.assign(float8.filter_fqns().begin(), float8.filter_fqns().end());
  if (runtime.dims().tp_enabled()) {
    Communicator* tp = &runtime.comms()->Get(MeshGroup::kTp);
    options.split_dim_of = &TensorParallel::SplitDimOf;
    options.reduce_max = [tp](at::Tensor& amax) {
      const absl::Status status = Await(tp->AllReduce(amax, ReduceOp::kMax));
      TORCH_CHECK(status.ok(), "float8 amax all-reduce over tensor-parallel ranks: ",
                  status.ToString());
    };
  }
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> converted,
                         ConvertToFloat8(model, options, setup.device));
  // A pipeline stage may hold only filtered layers: the stages' counts are summed.
  at::Tensor converted_count = at::full({1}, static_cast<int64_t>(converted.size()), at::kLong);
  if (runtime.dims().pp_enabled()) {
    TITAN_RETURN_IF_ERROR(
        Await(runtime.comms()->Get(MeshGroup::kPp).AllReduce(converted_count, ReduceOp::kSum)));
  }
  if (converted_count.item<int64_t>() == 0) {
    return absl::InvalidArgumentError(
        "[float8] filter_fqns: every linear layer is filtered out (or has a dim that is not a "
        "multiple of 16), so float8 would convert none; narrow the filters or remove the float8 "
        "converter");
  }
  if (config.training().loss_chunk_size() > 0 &&
      std::find(converted.begin(), converted.end(), "output") != converted.end()) {
    return absl::InvalidArgumentError(
        "[training] loss_chunk_size: the fused loss computes the output head in high precision, "
        "but float8 converted it; add \"output\" to [float8] filter_fqns");
  }
  return absl::OkStatus();
}

}  // namespace

ParallelizeOptions ModelParallelizeOptions(const JobConfig& config, const RunSetup& setup) {
  ParallelizeOptions parallelize;
  parallelize.ac_mode = config.activation_checkpoint().mode();
  parallelize.selective_ac_option = config.activation_checkpoint().selective_ac_option();
  const JobConfig::Parallelism& parallelism = config.parallelism();
  parallelize.reshard_after_forward = parallelism.fsdp_reshard_after_forward();
  parallelize.fsdp_float8_all_gather = config.float8().enable_fsdp_float8_all_gather();
  parallelize.tensor_parallel.sequence_parallel = parallelism.enable_sequence_parallel();
  parallelize.tensor_parallel.loss_parallel = !parallelism.disable_loss_parallel();
  parallelize.cp_load_balancer = parallelism.context_parallel_load_balancer();
  parallelize.cp_rotate_method = parallelism.context_parallel_rotate_method();
  if (setup.autocast_dtype) {
    // FSDP gathers parameters in the compute dtype (half the all-gather bytes); gradients are
    // reduced in [training] mixed_precision_reduce.
    parallelize.fsdp_mixed_precision = {*setup.autocast_dtype, at::kFloat};
  }
  return parallelize;
}

const ShardedState& ModelBundle::sharded() const {
  if (pipeline != nullptr) return *pipeline;
  return *data_parallel;
}

int64_t UsableHostMemoryBytes() {
  const int64_t page = sysconf(_SC_PAGESIZE);
  int64_t bytes = int64_t{sysconf(_SC_PHYS_PAGES)} * page;
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    // The limit counts the address space already mapped (libraries, heap, thread stacks).
    std::ifstream statm("/proc/self/statm");
    int64_t mapped_pages = 0;
    statm >> mapped_pages;
    const int64_t left = static_cast<int64_t>(limit.rlim_cur) - mapped_pages * page;
    bytes = std::min<int64_t>(bytes, std::max<int64_t>(left, 0));
  }
  return bytes;
}

namespace {

// CheckSequencesFitInMemory for one pair of keys: `seq_len` positions, `batch_size` sequences at a
// time; refused by the batch size where the token batch is the larger part and one sequence at a
// time would fit, else by the sequence length.
absl::Status CheckSequenceFitsInMemory(absl::string_view seq_len_key, int64_t seq_len,
                                       absl::string_view batch_key, int64_t batch_size,
                                       const TransformerArgs& args, int64_t memory_bytes) {
  constexpr int kRopeTablesAtOnce = 4;
  const int64_t rope_frequencies = args.rope.enabled ? args.head_size() / 2 : 0;
  // In double: 2^31 positions times the sizes overflow nothing there. Computing the tables holds
  // the angles, a temporary and its scaled copy in float64 and the float32 tables (lib/model/rope).
  const double rope_bytes =
      kRopeTablesAtOnce * static_cast<double>(seq_len) * rope_frequencies * sizeof(double);
  const double token_bytes = static_cast<double>(seq_len) * batch_size * 2 * sizeof(int32_t);
  if (rope_bytes + token_bytes <= static_cast<double>(memory_bytes)) return absl::OkStatus();
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  // The keys' names without their sections: "lower seq_len".
  const auto name = [](absl::string_view key) { return key.substr(key.find("] ") + 2); };
  const std::string tables = absl::StrFormat(
      "RoPE tables (%d positions x %d frequencies in float64, %d tables' worth while computed)",
      seq_len, rope_frequencies, kRopeTablesAtOnce);
  const std::string tokens =
      absl::StrFormat("token batch (%s %d x %s %d, inputs and labels)", name(batch_key), batch_size,
                      name(seq_len_key), seq_len);
  const bool batch_larger =
      token_bytes > rope_bytes && rope_bytes + token_bytes / batch_size <= memory_bytes;
  const absl::string_view key = batch_larger ? batch_key : seq_len_key;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s = %d does not fit in memory: its %s and %s alone take %.1f GiB, and this process has "
      "%.1f GiB left; lower %s",
      key, batch_larger ? batch_size : seq_len, batch_larger ? tokens : tables,
      batch_larger ? tables : tokens, (rope_bytes + token_bytes) / kGiB, memory_bytes / kGiB,
      name(key)));
}

}  // namespace

absl::Status CheckSequencesFitInMemory(const JobConfig& config, const TransformerArgs& args,
                                       int64_t memory_bytes, absl::string_view seq_len_key) {
  TITAN_RETURN_IF_ERROR(CheckSequenceFitsInMemory(
      seq_len_key, config.training().seq_len(), "[training] local_batch_size",
      config.training().local_batch_size(), args, memory_bytes));
  if (!config.validation().enable()) return absl::OkStatus();
  return CheckSequenceFitsInMemory("[validation] seq_len", config.validation().seq_len(),
                                   "[validation] local_batch_size",
                                   config.validation().local_batch_size(), args, memory_bytes);
}

absl::StatusOr<ModelBundle> BuildModel(const JobConfig& config, const ModelInfo& info,
                                       const RunSetup& setup, const DistributedRuntime& runtime,
                                       absl::string_view seq_len_key) {
  const auto& training = config.training();
  // Before the model is built: the meta build computes the RoPE tables on the host.
  TITAN_RETURN_IF_ERROR(
      CheckSequencesFitInMemory(config, info.args, UsableHostMemoryBytes(), seq_len_key));
  ModelBundle bundle;
  bundle.info = info;
  // RoPE tables cover the positions this job uses; the recorded shape keeps the model's own.
  TransformerArgs run_args = info.args;
  run_args.max_seq_len = std::max<int64_t>(
      training.seq_len(), config.validation().enable() ? config.validation().seq_len() : 0);
  bundle.model = info.spec->Build(run_args, at::TensorOptions().device(at::kMeta));
  bundle.num_params = bundle.model->NumParameters();
  if (!config.model().converters().empty()) {
    const auto& filters = config.float8().filter_fqns();
    TITAN_RETURN_IF_ERROR(CheckFloat8Filters(*bundle.model, {filters.begin(), filters.end()}));
  }
  const at::TensorOptions param_options = at::TensorOptions().device(setup.device).dtype(at::kFloat);
  std::string initial_load;
  if (setup.resume_dir.empty()) {
    TITAN_ASSIGN_OR_RETURN(initial_load, InitialLoadPath(config));
  } else if (!config.checkpoint().initial_load_path().empty()) {
    LOG(INFO) << "[checkpoint] initial_load_path not read: the weights come from "
              << setup.resume_dir << ", which this run resumes";
  }
  const bool in_hf = config.checkpoint().initial_load_in_hf();
  if (config.compile().enable_async_tensor_parallel()) {
    return absl::UnimplementedError(absl::StrCat(
        "[compile] enable_async_tensor_parallel = true: ",
        setup.device.is_cpu()
            ? "async tensor parallelism overlaps collectives with matmuls through CUDA symmetric "
              "memory; this run is on CPU, where Gloo offers no such overlap"
            : "async tensor parallelism is not implemented yet (its place: the decoder's "
              "region hooks, lib/parallel/tensor_parallel.cc)"));
  }
  ParallelizeOptions parallelize = ModelParallelizeOptions(config, setup);
  if (runtime.dims().pp_enabled()) {
    const JobConfig::Parallelism& p = config.parallelism();
    PipelineOptions pipeline;
    pipeline.split.schedule = p.pipeline_parallel_schedule();
    pipeline.split.pp = p.pipeline_parallel_degree();
    pipeline.split.layers_per_stage = p.pipeline_parallel_layers_per_stage();
    pipeline.split.first_stage_less_layers = p.pipeline_parallel_first_stage_less_layers();
    pipeline.split.last_stage_less_layers = p.pipeline_parallel_last_stage_less_layers();
    pipeline.split.split_points.assign(p.pipeline_parallel_split_points().begin(),
                                       p.pipeline_parallel_split_points().end());
    pipeline.microbatches = training.local_batch_size() / p.pipeline_parallel_microbatch_size();
    pipeline.schedule_csv = p.pipeline_parallel_schedule_csv();
    pipeline.parallelize = parallelize;
    pipeline.param_options = param_options;
    pipeline.convert = [&](Decoder& part) {
      return ApplyModelConverters(config, setup, runtime, part);
    };
    bundle.model.reset();
    TITAN_ASSIGN_OR_RETURN(bundle.pipeline,
                           PipelineParallel::Create(*info.spec, run_args, pipeline, runtime.dims(),
                                                    runtime.comms(), runtime.rank()));
    bundle.params = bundle.pipeline->params();
  } else {
    TITAN_RETURN_IF_ERROR(ApplyModelConverters(config, setup, runtime, *bundle.model));
    // FSDP initialises one group at a time after sharding (the same weights as one process with
    // the same seed), so no rank ever holds the whole model, an initial load's included.
    if (runtime.dims().fsdp_enabled()) {
      parallelize.materialize = param_options;
    } else {
      bundle.model->Materialize(param_options);
      bundle.model->InitWeights();
    }
    TITAN_ASSIGN_OR_RETURN(bundle.data_parallel,
                           info.spec->parallelize(*bundle.model, parallelize, runtime.dims(),
                                                  runtime.comms()));
    bundle.params = bundle.model->NamedParameters();
  }
  if (!initial_load.empty()) {
    // Each rank fills the pieces it holds (its stages' FSDP rows within tensor-parallel slices),
    // reading one whole tensor at a time.
    TensorBoxes boxes;
    NamedTensors pieces = bundle.sharded().CheckpointPieces(DetachedParams(bundle.params), boxes);
    std::vector<ParamRef> targets;
    for (auto& [name, piece] : pieces) targets.push_back({name, &piece});
    TITAN_RETURN_IF_ERROR(LoadModelWeights(initial_load, in_hf, info, targets, boxes));
    if (bundle.pipeline != nullptr) TITAN_RETURN_IF_ERROR(bundle.pipeline->SyncTiedCopies());
    LOG(INFO) << "initial weights from " << initial_load;
  }
  bundle.flops_per_token = info.spec->flops_per_token(info.args, training.seq_len());
  LOG(INFO) << "model " << info.name() << " " << (info.flavor.empty() ? "custom" : info.flavor)
            << ": " << bundle.num_params << " parameters (" << DescribeArchitecture(info.args)
            << ")";
  return bundle;
}

NamedTensors DetachedParams(const std::vector<ParamRef>& params) {
  NamedTensors tensors;
  for (const ParamRef& p : params) tensors.emplace_back(p.name, p.tensor->detach());
  return tensors;
}

absl::StatusOr<std::unique_ptr<Optimizer>> BuildOptimizer(const JobConfig& config,
                                                          const std::vector<ParamRef>& params,
                                                          const DistributedRuntime& runtime) {
  if (!runtime.dims().pp_enabled()) return Optimizer::Create(params, config.optimizer());
  Communicator* pp = &runtime.comms()->Get(MeshGroup::kPp);
  const auto sum_over_stages =
      [pp](const std::vector<int64_t>& counts) -> absl::StatusOr<std::vector<int64_t>> {
    at::Tensor sums = at::tensor(counts, at::kLong);
    TITAN_RETURN_IF_ERROR(WithContext(Await(pp->AllReduce(sums, ReduceOp::kSum)),
                                      "[optimizer] param_groups: summing the stages' matches"));
    const int64_t* sum = sums.data_ptr<int64_t>();
    return std::vector<int64_t>(sum, sum + sums.numel());
  };
  return Optimizer::Create(params, config.optimizer(), sum_over_stages);
}

absl::StatusOr<WarmupStableDecaySchedule> BuildLrSchedule(const JobConfig& config) {
  const auto& lr = config.lr_scheduler();
  return WarmupStableDecaySchedule::Create(config.training().steps(), lr.warmup_steps(),
                                           lr.decay_ratio(), lr.decay_type(), lr.min_lr_factor());
}

int64_t GradientAccumulationSteps(const JobConfig& config, const RunSetup& setup) {
  const auto& training = config.training();
  const int64_t global_batch =
      training.global_batch_size() > 0 ? training.global_batch_size() : training.local_batch_size();
  return std::max<int64_t>(1, global_batch / (training.local_batch_size() * setup.dp_size));
}

absl::StatusOr<std::unique_ptr<TextDataLoader>> BuildTrainData(const JobConfig& config,
                                                               const Tokenizer* tokenizer,
                                                               const RunSetup& setup) {
  const auto& training = config.training();
  const TextDatasetOptions data =
      RankShare(config, setup, training.dataset_path(), training.seq_len());
  absl::StatusOr<std::unique_ptr<PackedTextDataset>> dataset =
      PackedTextDataset::Open(data, tokenizer);
  TITAN_RETURN_IF_ERROR(WithContext(dataset.status(), "[training] dataset_path"));
  LOG(INFO) << "dataset " << training.dataset() << ": " << training.dataset_path();
  auto loader = std::make_unique<TextDataLoader>(*std::move(dataset));
  // Two batches ahead: tokenizing the next step's windows overlaps this step's compute.
  loader->StartReadAhead(training.local_batch_size(), /*depth=*/2);
  return loader;
}

absl::StatusOr<std::unique_ptr<TextDataLoader>> BuildValidationData(const JobConfig& config,
                                                                    const Tokenizer* tokenizer,
                                                                    const RunSetup& setup) {
  const auto& validation = config.validation();
  TextDatasetOptions data =
      RankShare(config, setup, validation.dataset_path(), validation.seq_len());
  // As torchtitan's validator: a bounded evaluation repeats the data, a whole one reads it once.
  data.infinite = validation.steps() != -1;
  // torchtitan's validator loads split="validation" of the dataset.
  data.split = "validation";
  // The trainer's CheckValidationData names the key of an error.
  TITAN_ASSIGN_OR_RETURN(auto dataset, PackedTextDataset::Open(data, tokenizer));
  // Built afresh for every evaluation: the trainer says once, at startup, that it repeats.
  return std::make_unique<TextDataLoader>(std::move(dataset), /*warn_relooped=*/false);
}

absl::StatusOr<std::unique_ptr<CheckpointManager>> BuildCheckpointManager(
    const JobConfig& config, const RunSetup& setup, const DistributedRuntime& runtime,
    const std::string& folder, int extra_kept) {
  const auto& ckpt = config.checkpoint();
  if (!ckpt.enable()) return nullptr;
  CheckpointRanks ranks;
  ranks.rank = runtime.rank();
  ranks.world_size = runtime.dims().world_size();
  ranks.run_id = setup.run_id;
  ranks.commit_timeout = absl::Seconds(config.comm().train_timeout_seconds());
  const int keep = ckpt.keep_latest_k();  // 0 keeps every step
  return std::make_unique<CheckpointManager>(
      UnderDumpFolder(config, folder.empty() ? ckpt.folder() : folder),
      keep > 0 ? keep + extra_kept : 0, ranks);
}

namespace {

// Whether a run with TensorBoard off may tidy save_tb_folder: a plain subfolder of the dump folder
// ("tb", "a/tb"), outside the checkpoint folder; not another run's folder (absolute), the dump
// folder itself, nor a saved step.
bool OwnTensorBoardFolder(const JobConfig& config) {
  const std::string& tb = config.metrics().save_tb_folder();
  const std::optional<std::vector<std::string>> parts = PathParts(tb);
  if (absl::StartsWith(tb, "/") || !parts.has_value() || parts->empty()) return false;
  const std::string& checkpoint = config.checkpoint().folder();
  const std::optional<std::vector<std::string>> checkpoint_parts = PathParts(checkpoint);
  if (absl::StartsWith(checkpoint, "/") || !checkpoint_parts.has_value()) return true;
  return checkpoint_parts->empty() || parts->size() < checkpoint_parts->size() ||
         !std::equal(checkpoint_parts->begin(), checkpoint_parts->end(), parts->begin());
}

// The metrics outputs an earlier run left in the folder that no rank of this one writes: every
// rank's when save_for_all_ranks is off or the rank is gone or is the writer now, and TensorBoard's
// when it is off. The writer has them follow its start, so that no output keeps the steps it
// redoes.
void AddUnwrittenOutputs(const JobConfig& config, int world_size, int writer,
                         MetricsLoggerOptions* metrics) {
  const auto written = [&](int r) {
    return config.metrics().save_for_all_ranks() && r < world_size && r != writer;
  };
  const std::string& dump = config.job().dump_folder();
  for (const int r : RanksIn(dump, "rank_", "")) {
    if (!written(r)) metrics->unwritten_dump_folders.push_back(absl::StrCat(dump, "/rank_", r));
  }
  const std::string tb = UnderDumpFolder(config, config.metrics().save_tb_folder());
  const bool tensorboard = config.metrics().enable_tensorboard();
  if (!tensorboard && !OwnTensorBoardFolder(config)) return;
  if (!tensorboard) metrics->unwritten_tensorboard_folders.push_back(tb);
  for (const int r : RanksIn(tb, "rank_", "")) {
    if (!tensorboard || !written(r)) {
      metrics->unwritten_tensorboard_folders.push_back(absl::StrCat(tb, "/rank_", r));
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLogger>> BuildMetrics(const JobConfig& config,
                                                            const DistributedRuntime& runtime,
                                                            const StepLogStart& start) {
  const int rank = runtime.rank();
  // torchtitan: with pipeline parallelism only the last stage knows the loss.
  MeshCoordinates first_of_last_stage;
  first_of_last_stage.pp = runtime.dims().pp() - 1;
  const int writer = runtime.dims().RankOf(first_of_last_stage);
  if (rank != writer && !config.metrics().save_for_all_ranks()) return nullptr;
  const std::string rank_folder = rank == writer ? "" : absl::StrCat("/rank_", rank);
  MetricsLoggerOptions metrics;
  metrics.dump_folder = config.job().dump_folder() + rank_folder;
  if (config.metrics().enable_tensorboard()) {
    metrics.tensorboard_folder =
        UnderDumpFolder(config, config.metrics().save_tb_folder()) + rank_folder;
  }
  metrics.disable_color_printing = config.metrics().disable_color_printing();
  metrics.start = start;
  if (rank == writer) AddUnwrittenOutputs(config, runtime.dims().world_size(), writer, &metrics);
  return MetricsLogger::Create(metrics);
}

}  // namespace titan
