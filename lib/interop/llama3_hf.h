#ifndef TITAN_LIB_INTEROP_LLAMA3_HF_H_
#define TITAN_LIB_INTEROP_LLAMA3_HF_H_

// Llama 3 between titan (torchtitan's names, Meta's interleaved RoPE layout) and Hugging Face's
// LlamaForCausalLM (its own names, rotate-half RoPE layout, config.json).

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "models/llama3/model_args.h"

namespace titan {

// What a checkpoint says about its model beyond the tensors: the shape, the flavor it matches ("" for
// custom shapes) and the tokenizer's special ids as Hugging Face writes them (null when unknown; eos
// may be a list).
struct Llama3ModelInfo {
  Llama3Args args;
  std::string flavor;
  nlohmann::json bos_token_id;
  nlohmann::json eos_token_id;
};

// The flavor whose architecture (everything but vocab_size and max_seq_len) equals `args`, or "".
std::string MatchLlama3Flavor(const Llama3Args& args);

// Llama3Args as JSON (field names as the struct's) and back; `source` prefixes errors. Also the
// "model" entry titan checkpoints written by convert_checkpoint carry in their manifest state.
nlohmann::json Llama3ArgsToJson(const Llama3Args& args);
absl::StatusOr<Llama3Args> Llama3ArgsFromJson(const nlohmann::json& json, const std::string& source);
nlohmann::json Llama3ModelInfoToJson(const Llama3ModelInfo& info);
absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromJson(const nlohmann::json& json,
                                                        const std::string& source);

// Every parameter of the titan model `args` describes, with its shape, in the model's order.
std::vector<std::pair<std::string, std::vector<int64_t>>> Llama3ParameterShapes(
    const Llama3Args& args);

// Hugging Face config.json for `info`; `torch_dtype` is "float32", "bfloat16", ...
nlohmann::json Llama3HfConfig(const Llama3ModelInfo& info, const std::string& torch_dtype);
// generation_config.json (the special ids).
nlohmann::json Llama3HfGenerationConfig(const Llama3ModelInfo& info);
// Reads a LlamaForCausalLM config.json (legacy rope_scaling + rope_theta, or transformers 5's
// rope_parameters); rejects what titan's Llama 3 cannot represent (biases, other activations, other
// RoPE types, head_dim != hidden_size / heads). `source` (the path) prefixes errors.
absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromHfConfig(const nlohmann::json& config,
                                                            const std::string& source);

// Parameter names: "layers.0.attention.wq.weight" <-> "model.layers.0.self_attn.q_proj.weight".
absl::StatusOr<std::string> TitanToHfName(const std::string& titan_name);
absl::StatusOr<std::string> HfToTitanName(const std::string& hf_name);

// The q/k row permutation between Meta's interleaved RoPE pairs (2i, 2i+1) and Hugging Face's
// rotate-half pairs (i, i + head_dim/2) within each head, as transformers' convert_llama_weights_to_hf
// permute(): w.view(heads, rows/heads/2, 2, cols).transpose(1, 2).reshape(rows, cols). Pure data
// movement (bitwise exact); returns a new contiguous tensor.
at::Tensor InterleavedToRotateHalf(const at::Tensor& weight, int64_t heads);
at::Tensor RotateHalfToInterleaved(const at::Tensor& weight, int64_t heads);

// A titan tensor as Hugging Face stores it (q/k permuted), and back; `args` gives the head counts.
at::Tensor TitanTensorToHf(const std::string& titan_name, const at::Tensor& tensor,
                           const Llama3Args& args);
at::Tensor HfTensorToTitan(const std::string& titan_name, const at::Tensor& tensor,
                           const Llama3Args& args);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_LLAMA3_HF_H_
