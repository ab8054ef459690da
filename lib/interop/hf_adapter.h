#ifndef TITAN_LIB_INTEROP_HF_ADAPTER_H_
#define TITAN_LIB_INTEROP_HF_ADAPTER_H_

// The shared decoder's tensors between titan (torchtitan's names, the family's RoPE layout) and
// Hugging Face's *ForCausalLM checkpoints (their names, always the rotate-half RoPE layout), for
// every registered family. config.json lives in lib/interop/hf_config.h.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "lib/model/transformer_args.h"

namespace titan {

// Parameter names: "layers.0.attention.wq.weight" <-> "model.layers.0.self_attn.q_proj.weight",
// "layers.0.attention.q_norm.weight" <-> "model.layers.0.self_attn.q_norm.weight", ...
absl::StatusOr<std::string> TitanToHfName(const std::string& titan_name);
absl::StatusOr<std::string> HfToTitanName(const std::string& hf_name);

// The q/k row permutation between Meta's interleaved RoPE pairs (2i, 2i+1) and Hugging Face's
// rotate-half pairs (i, i + head_dim/2) within each head, as transformers'
// convert_llama_weights_to_hf permute(): w.view(heads, rows/heads/2, 2, cols).transpose(1,
// 2).reshape(rows, cols). Pure data movement (bitwise exact); returns a new contiguous tensor.
at::Tensor InterleavedToRotateHalf(const at::Tensor& weight, int64_t heads);
at::Tensor RotateHalfToInterleaved(const at::Tensor& weight, int64_t heads);

// A titan tensor as Hugging Face stores it, and back. Only families whose RoPE layout is
// interleaved (args.rope.layout) change anything: q/k projections and, with qk-norm, the per-head
// norm weights are permuted; every other tensor is returned as is.
at::Tensor TitanTensorToHf(const std::string& titan_name, const at::Tensor& tensor,
                           const TransformerArgs& args);
at::Tensor HfTensorToTitan(const std::string& titan_name, const at::Tensor& tensor,
                           const TransformerArgs& args);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_HF_ADAPTER_H_
