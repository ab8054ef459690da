#ifndef TITAN_LIB_MODEL_BF16_WEIGHT_COPIES_H_
#define TITAN_LIB_MODEL_BF16_WEIGHT_COPIES_H_

#include <ATen/ATen.h>

namespace titan {

// bf16 copies of fp32 weights that the optimizer writes in the pass that updates the weights
// (titan's Adam kernel), so that MixedPrecisionLinear does not cast every weight every forward
// (2.3B elements, 13.6 GB moved in a Llama 3 8B-8-layer step). A linear asks for its weight's
// copy; the optimizer writes the copies asked for. Off by default: the trainer turns them on where
// the forward's bf16 weights are kept for backward anyway (no activation checkpointing): the
// copies then add no memory where activations set the peak (start of backward), and 2 bytes a
// weight element to the end of backward and the optimizer step. Not with CUDA graphs: a graph
// captured with a copy would read it whatever happened to the weight since. Keyed by the weight's
// identity (held weakly); thread-safe.
void SetBf16WeightCopiesEnabled(bool enabled);
bool Bf16WeightCopiesEnabled();

// `weight` (fp32) in bf16: its copy where one was written since the weight last changed (its
// version counter), else weight.to(bf16), asking for a copy when enabled.
at::Tensor Bf16WeightOf(const at::Tensor& weight);

// For the optimizer: the tensor to write param's bf16 copy into (allocated at the first call),
// undefined where no linear asked for one.
at::Tensor Bf16WeightCopyToWrite(const at::Tensor& param);

// For the optimizer, after enqueueing what writes the copy: it now holds param.to(bf16), until
// param changes otherwise.
void Bf16WeightCopyWritten(const at::Tensor& param);

// Forgets param's copy (the optimizer that wrote it is going away), freeing it.
void DropBf16WeightCopy(const at::Tensor& param);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_BF16_WEIGHT_COPIES_H_
