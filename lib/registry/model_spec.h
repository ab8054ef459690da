#ifndef TITAN_LIB_REGISTRY_MODEL_SPEC_H_
#define TITAN_LIB_REGISTRY_MODEL_SPEC_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/model/decoder.h"
#include "lib/model/transformer_args.h"
#include "lib/parallel/data_parallel.h"
#include "lib/parallel/parallelize.h"
#include "nlohmann/json.hpp"

namespace titan {

struct ModelSpec;

// What a checkpoint says about its model beyond the tensors: the family, shape, the flavor it
// matches ("" for custom shapes) and the tokenizer's special ids as Hugging Face writes them
// (null when unknown; eos may be a list).
struct ModelInfo {
  const ModelSpec* spec = nullptr;
  TransformerArgs args;
  std::string flavor;
  nlohmann::json bos_token_id;
  nlohmann::json eos_token_id;
  nlohmann::json pad_token_id;
  // The Hugging Face generation_config.json the model came with (its authors' sampling defaults
  // and stop ids), written back verbatim on export; null for a model without one (a flavor).
  nlohmann::json hf_generation_config;

  const std::string& name() const;  // the family's
};

// What a family's Hugging Face checkpoints look like beyond the shared decoder's (lib/interop
// reads and writes the rest): the config.json identity and the constant keys transformers
// expects. q/k need the RoPE permutation exactly when the family's layout is interleaved.
struct HfAdapter {
  std::string model_type;    // config.json "model_type", e.g. "llama"
  std::string architecture;  // e.g. "LlamaForCausalLM"
  nlohmann::json extra_config = nlohmann::json::object();  // written as is, ignored on reading
  // What a config.json without a key means: the family's transformers config class defaults
  // (transformers 5.24), so that titan reads the model transformers loads.
  struct ConfigDefaults {
    int64_t hidden_size = 4096;
    int64_t intermediate_size = 11008;
    int64_t num_hidden_layers = 32;
    int64_t num_attention_heads = 32;
    int64_t num_key_value_heads = 0;  // 0: num_attention_heads (LlamaConfig's None)
    int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads (LlamaConfig's None)
    int64_t vocab_size = 32000;
    int64_t max_position_embeddings = 2048;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000;
    bool tie_word_embeddings = false;
    nlohmann::json bos_token_id;  // null: none
    nlohmann::json eos_token_id;
    // Qwen-style sliding window (use_sliding_window): its width (0: none) and first layer (0:
    // none).
    int64_t sliding_window = 0;
    int64_t max_window_layers = 0;
    // LlamaConfig refuses a hidden_size that the heads do not divide, even with a head_dim given.
    bool heads_divide_hidden_size = false;
    // Keys titan reads that the family's config class has no field for (LlamaConfig's
    // use_sliding_window): the family's model never reads them, so titan ignores them too.
    std::vector<std::string> absent_fields;
  } config_defaults;
};

// Meta's consolidated format (params.json + consolidated.00.pth), for families that have one.
struct MetaAdapter {
  // InvalidArgument for a model params.json cannot describe.
  std::function<absl::StatusOr<nlohmann::json>(const TransformerArgs&)> params;
  std::function<absl::StatusOr<ModelInfo>(const ModelSpec& spec, const nlohmann::json& params,
                                          const std::string& source)>
      describe;
};

// Applies data parallelism (and, later, tensor/pipeline/context parallelism) and activation
// checkpointing to a model, as torchtitan's parallelize_<family>.
using ParallelizeFn = std::function<absl::StatusOr<std::unique_ptr<DataParallel>>(
    Decoder& model, const ParallelizeOptions& options, const ParallelDims& dims,
    const MeshCommunicators* comms)>;

// A model family (torchtitan's ModelSpec): its sizes, defaults and adapters. The trainer, the
// interop tools, checkpoint_inspect and titan_rl look a family up by [model] name and use nothing
// else, so a new family is a folder under models/ that registers one of these.
struct ModelSpec {
  std::string name;
  // Named sizes in the order --help lists them. A vocab_size of 0 takes the tokenizer's.
  std::vector<std::pair<std::string, TransformerArgs>> flavors;
  // The family's architecture defaults (RoPE layout, init, norms) for shapes read from files.
  TransformerArgs defaults;
  HfAdapter hf;
  std::optional<MetaAdapter> meta;
  ParallelizeFn parallelize;
  // Training FLOPs per token at `seq_len` (MFU); default: the dense decoder's count.
  std::function<int64_t(const TransformerArgs&, int64_t seq_len)> flops_per_token;

  std::vector<std::string> FlavorNames() const;
  // NotFound names the family's flavors.
  absl::StatusOr<TransformerArgs> Flavor(const std::string& flavor) const;
  // The flavor whose architecture (vocab_size and max_seq_len aside) equals `args`, or "".
  std::string MatchFlavor(const TransformerArgs& args) const;
  // The model on `options`' device (meta: no storage), whole or one part of it.
  std::unique_ptr<Decoder> Build(const TransformerArgs& args, const at::TensorOptions& options,
                                 const DecoderPart& part = {}) const;
};

// Families register at static initialisation (TITAN_REGISTER_MODEL); a binary links the
// families it offers (//models:all).
void RegisterModel(ModelSpec spec);
// NotFound lists the registered names.
absl::StatusOr<const ModelSpec*> FindModel(const std::string& name);
std::vector<std::string> RegisteredModelNames();

#define TITAN_REGISTER_MODEL(make_spec) \
  static const bool titan_model_registered_##make_spec = (::titan::RegisterModel(make_spec()), true)

// `args` of `spec` with the flavor it matches filled in.
ModelInfo DescribeModel(const ModelSpec& spec, const TransformerArgs& args,
                        nlohmann::json bos_token_id = nullptr,
                        nlohmann::json eos_token_id = nullptr);

// OK unless a tokenizer of `tokenizer_ids` ids has ids past the embedding of `info`'s model
// (indexing past it fails at the first such token): InvalidArgument naming `tokenizer_key`, the
// key or flag that gave the tokenizer.
absl::Status CheckTokenizerFitsModel(int64_t tokenizer_ids, const ModelInfo& info,
                                     absl::string_view tokenizer_key);

// The "model" entry of a titan checkpoint's state ({name, flavor, args, bos/eos, and pad and
// hf_generation_config when set}). Entries written
// before families existed have no name: `default_model` is assumed then.
nlohmann::json ModelInfoToJson(const ModelInfo& info);
absl::StatusOr<ModelInfo> ModelInfoFromJson(const nlohmann::json& json, const std::string& source,
                                            const std::string& default_model = "llama3");

// Training FLOPs per token of a dense decoder (lib/metrics' count, tied heads included): the
// default of ModelSpec::flops_per_token.
int64_t DenseFlopsPerToken(const ModelSpec& spec, const TransformerArgs& args, int64_t seq_len);

// Every parameter of the model `args` describes, with its shape, in the model's order (built on
// the meta device: nothing is allocated).
std::vector<std::pair<std::string, std::vector<int64_t>>> ParameterShapes(
    const ModelSpec& spec, const TransformerArgs& args);

}  // namespace titan

#endif  // TITAN_LIB_REGISTRY_MODEL_SPEC_H_
