#ifndef TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_
#define TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_

// What the trainer reads from [checkpoint] initial_load_path: the model a checkpoint holds, and
// its weights.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/checkpoint_manifest.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/model/module.h"
#include "lib/registry/model_spec.h"

namespace titan {

// The format of the checkpoint at `path` as [checkpoint] initial_load_in_hf = `in_hf` reads it: a
// folder holding both a Hugging Face and a Meta checkpoint is HF with it, Meta without it (with a
// warning naming the other setting); otherwise what the files hold.
absl::StatusOr<CheckpointFormat> DetectInitialLoadFormat(const std::string& path, bool in_hf);

// The model the checkpoint at `path` holds ([model] flavor = "from_checkpoint"): a Hugging Face
// folder's config.json (`in_hf`: config.json alone, so a folder without weights gives a shape to
// train from scratch), a titan step directory or checkpoint root's recorded
// model entry (or, for trainer outputs that do not record it, the flavor its shapes match), or
// Meta's params.json. `model_name` non-empty: the checkpoint must hold that family.
absl::StatusOr<ModelInfo> DescribeCheckpointAt(const std::string& path, bool in_hf,
                                               const std::string& model_name = "");

// Copies the checkpoint's weights (titan step dir or root, Hugging Face with `in_hf` or detected,
// Meta) into `params`: every parameter of `expected`'s model, or one pipeline stage's. HF q/k are
// permuted back to the family's RoPE layout. A checkpoint of another shape fails with one short
// line: what it holds against `expected` and the first few differing tensors. A param named in
// `boxes` is a piece of its tensor (a shard) and receives the part inside its box; the whole
// tensors are read one at a time, so a rank's peak is its pieces and one tensor.
absl::Status LoadModelWeights(const std::string& path, bool in_hf, const ModelInfo& expected,
                              const std::vector<ParamRef>& params,
                              const TensorBoxes& boxes = TensorBoxes());
// The same from an open reader (a caller may present a view of a checkpoint's tensors).
absl::Status LoadModelWeights(const CheckpointReader& reader, const ModelInfo& expected,
                              const std::vector<ParamRef>& params,
                              const TensorBoxes& boxes = TensorBoxes());

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_
