#ifndef TITAN_LIB_INTEROP_CONVERT_H_
#define TITAN_LIB_INTEROP_CONVERT_H_

// Converts checkpoints of any registered model family between titan's step directories, Hugging
// Face's *ForCausalLM folders and (families that have one) Meta's format, streaming: tensors are
// read from memory-mapped files one at a time and Hugging Face output is written shard by shard, so
// at most one shard of converted tensors (titan output: the tensors whose layout or dtype changes)
// is held in memory.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/registry/model_spec.h"

namespace titan {

struct ConvertSummary {
  std::string input;   // The directory read (a titan step directory when given its root).
  std::string output;  // The directory written (for titan, the step directory).
  std::string model;   // The family.
  std::string flavor;  // "" for custom shapes.
  int64_t tensors = 0;
  uint64_t bytes = 0;              // Tensor bytes written.
  std::vector<std::string> files;  // Files written, relative to `output`.
};

struct ConvertOptions {
  std::optional<CheckpointFormat> from;  // Unset: detected from the input's files.
  CheckpointFormat to = CheckpointFormat::kHf;
  // The family and flavor; empty: what the input says (config.json's model_type, the titan
  // manifest's model entry, llama3 for Meta), else the registered flavor its shapes match. When
  // given, the input must agree.
  std::string model;
  std::string flavor;
  std::string dtype = "keep";  // "keep", "bf16" or "fp32" (floating tensors only).
  // The output-specific options are refused for other outputs, so none is silently ignored.
  std::optional<uint64_t> max_shard_bytes;  // hf output, default HfExportOptions'.
  std::string tokenizer_dir;    // hf output: tokenizer files copied from here when set.
  std::optional<int64_t> step;  // titan output (>= 0): default the input's step, else 0.
  // Non-zero (a SIGINT/SIGTERM handler sets it): stop before the next tensor with Cancelled,
  // leaving no output. A file being written is finished first.
  const std::atomic<int>* stop_signal = nullptr;
  // Called with the summary once the output is whole and in place (hf: renamed into place), so
  // that a failure to put it there reports no summary. Its failure (the summary lost on stdout)
  // fails the conversion, which then removes the output it just put in place (an empty folder
  // given as the output is left empty), so that no output stands without its summary.
  std::function<absl::Status(const ConvertSummary&)> after_commit;
};

// Converts `input` into the folder `output_path` names, which must not exist or be empty (a path
// with "." or ".." components is resolved first, and is absolute in errors and the summary); a
// failed or stopped conversion removes the output directory it made.
absl::StatusOr<ConvertSummary> ConvertCheckpoint(const std::string& input,
                                                 const std::string& output_path,
                                                 const ConvertOptions& options);

// What a Hugging Face export writes besides the weights and configs.
struct HfExportOptions {
  uint64_t max_shard_bytes = 5'000'000'000;  // A larger tensor gets a shard of its own.
  std::string tokenizer_dir;  // Tokenizer files copied from here when set (as convert's).
  // With tokenizer_dir: exported as tokenizer.json in place of tokenizer_dir's own (the
  // tokenizer.json file, of any name, that [model] tokenizer_path names).
  std::string tokenizer_json;
};

// [checkpoint] last_save_in_hf: writes a model held in memory (titan names, whole tensors,
// any device; every parameter of info.args and nothing else) exactly as ConvertCheckpoint
// --to=hf writes a titan checkpoint of it: config.json, generation_config.json (from `info`:
// shape, bos/eos ids), model.safetensors or shards with their index. Floating tensors are cast to
// `dtype`. Tensors are copied to CPU one at a time (at most one shard held). `output_dir` must not
// exist or be empty; the export is written into <output_dir>.tmp-<pid> and renamed into place
// once complete, so it is either absent or whole (a crash's leftover temporary is removed by the
// next export to the same path).
absl::Status SaveHfExport(const NamedTensors& model, const ModelInfo& info, at::ScalarType dtype,
                          const std::string& output_dir, const HfExportOptions& options = {});

// Which tensors (indices into `tensor_bytes`, in order) each shard of an HF export holds, as
// huggingface_hub's split_torch_state_dict_into_shards (save_pretrained) plans them: a tensor
// larger than `max_shard_bytes` gets a shard of its own, placed before the shard being filled,
// which goes on filling; another starts a new shard where it would take the current one past the
// limit.
std::vector<std::vector<size_t>> PlanHfShards(const std::vector<uint64_t>& tensor_bytes,
                                              uint64_t max_shard_bytes);

// "5GB", "500MB", "64KiB", "1000" (bytes) as transformers' max_shard_size: KB/MB/GB are powers of
// 1000, KiB/MiB/GiB of 1024.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_CONVERT_H_
