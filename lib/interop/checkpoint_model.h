#ifndef TITAN_LIB_INTEROP_CHECKPOINT_MODEL_H_
#define TITAN_LIB_INTEROP_CHECKPOINT_MODEL_H_

// Which registered model a checkpoint holds, and which of its tensors is which parameter.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/registry/model_spec.h"

namespace titan {

// The model `reader` holds: from hf's config.json (the family by model_type; with the folder's
// generation_config.json, which an HF export writes back), from the "model" entry of a titan
// manifest's state (entries without a name are llama3), from Meta's params.json (a family with a
// Meta format), or, for titan checkpoints that do not record it, the registered family and flavor
// whose parameter shapes the tensors match. `model_name` / `flavor`, when not
// empty, narrow the search and must agree with what the checkpoint says; a flavor the family (any
// family, before it is known) lacks is refused as convert_checkpoint's unknown --flavor, with the
// flavors there are.
absl::StatusOr<ModelInfo> DescribeCheckpoint(const CheckpointReader& reader,
                                             const std::string& model_name,
                                             const std::string& flavor);

// The model a Hugging Face folder's config.json describes (with its generation_config.json),
// whether or not the folder holds weights (a shape to train from scratch); `model_name` as above.
// Here and in DescribeCheckpoint, a head that config.json ties but the weights hold apart
// (lm_head.weight unequal to the embedding) is read untied with a warning, as transformers reads it.
absl::StatusOr<ModelInfo> DescribeHfConfig(const std::string& directory,
                                           const std::string& model_name);

// "llama3 debugmodel (dim 256, 6 layers, ...)", or "qwen3 (dim 576, ...)" for a custom shape.
std::string DescribeModelInfo(const ModelInfo& info);

// The fields two architectures differ in (vocab_size and max_seq_len aside), by their
// TransformerArgsToJson names with rope's prefixed, in name order ("norm_eps 1e-06 vs 1e-05,
// rope_theta 10000 vs 1000000"); "" when SameArchitecture. Mismatch errors print it, since
// DescribeArchitecture's line omits some of them.
std::string ArchitectureDifferences(const TransformerArgs& a, const TransformerArgs& b);

// InvalidArgument in one line ("<source>: checkpoint holds <saved>, the model is <model>; first
// differing tensors: ...") unless both have the same parameters with the same shapes.
absl::Status CheckSameParameters(const ModelInfo& saved, const ModelInfo& model,
                                 const std::string& source);

// One model parameter and where the checkpoint keeps it.
struct ParameterSource {
  std::string titan_name;
  std::string source_name;
};

// Pairs every parameter of `info`'s model (in model order) with a checkpoint tensor (HF names
// mapped to titan's), checking shapes. A mismatch is one short line: the checkpoint's directory,
// what it holds (`holds`, when the caller knows it to differ) against `info`, and the first few
// differing tensors with a count of the rest. `absent_allowed`: parameters the checkpoint lacks are
// no difference (an inspected folder with damaged files, whose tensors are unknown).
absl::StatusOr<std::vector<ParameterSource>> MatchParameters(const CheckpointReader& reader,
                                                             const ModelInfo& info,
                                                             const ModelInfo* holds = nullptr,
                                                             bool absent_allowed = false);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_CHECKPOINT_MODEL_H_
