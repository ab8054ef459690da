#include "lib/interop/load_weights.h"

#include <c10/core/GradMode.h>

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/hf_adapter.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenCheckpoint(const std::string& path,
                                                                 bool in_hf) {
  if (in_hf) return CheckpointReader::Open(path, CheckpointFormat::kHf);
  TITAN_ASSIGN_OR_RETURN(const CheckpointFormat format,
                         DetectInitialLoadFormat(path, /*in_hf=*/false));
  return CheckpointReader::Open(path, format);
}

}  // namespace

absl::StatusOr<CheckpointFormat> DetectInitialLoadFormat(const std::string& path, bool in_hf) {
  return DetectCheckpointFormat(path,
                                in_hf ? "[checkpoint] initial_load_in_hf = false reads the Meta one"
                                      : "[checkpoint] initial_load_in_hf = true reads the Hugging "
                                        "Face one",
                                /*hf_of_both=*/in_hf);
}

absl::StatusOr<ModelInfo> DescribeCheckpointAt(const std::string& path, bool in_hf,
                                               const std::string& model_name) {
  if (in_hf) return DescribeHfConfig(path, model_name);
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, OpenCheckpoint(path, in_hf));
  return DescribeCheckpoint(*reader, model_name, /*flavor=*/"");
}

absl::Status LoadModelWeights(const std::string& path, bool in_hf, const ModelInfo& expected,
                              const std::vector<ParamRef>& params, const TensorBoxes& boxes) {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, OpenCheckpoint(path, in_hf));
  return LoadModelWeights(*reader, expected, params, boxes);
}

absl::Status LoadModelWeights(const CheckpointReader& reader, const ModelInfo& expected,
                              const std::vector<ParamRef>& params, const TensorBoxes& boxes) {
  const std::string& path = reader.directory();
  // The model's own shape decides; what the checkpoint says it holds only explains a mismatch.
  absl::StatusOr<std::vector<ParameterSource>> sources = MatchParameters(reader, expected);
  if (!sources.ok()) {
    // Worth saying only when its one-line description differs from the model's.
    const absl::StatusOr<ModelInfo> holds = DescribeCheckpoint(reader, "", "");
    if (holds.ok() && DescribeModelInfo(*holds) != DescribeModelInfo(expected)) {
      return MatchParameters(reader, expected, &*holds).status();
    }
    return sources.status();
  }
  absl::flat_hash_map<std::string, at::Tensor*> slots;
  for (const ParamRef& p : params) slots[p.name] = p.tensor;
  c10::NoGradGuard no_grad;
  for (const ParameterSource& source : *sources) {
    auto slot = slots.find(source.titan_name);
    if (slot == slots.end()) continue;  // another pipeline stage's
    TITAN_ASSIGN_OR_RETURN(at::Tensor tensor, reader.Get(source.source_name));
    if (reader.format() == CheckpointFormat::kHf) {
      tensor = HfTensorToTitan(source.titan_name, tensor, expected.args);
    }
    if (auto box = boxes.find(source.titan_name); box != boxes.end()) {
      for (int64_t dim = 0; dim < tensor.dim(); ++dim) {
        tensor = tensor.narrow(dim, box->second.offsets[dim], slot->second->size(dim));
      }
    }
    slot->second->copy_(tensor);
    slots.erase(slot);
  }
  if (!slots.empty()) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no tensor for parameter ", slots.begin()->first));
  }
  return absl::OkStatus();
}

}  // namespace titan
