#include "lib/interop/load_weights.h"

#include <c10/core/GradMode.h>

#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/convert.h"
#include "lib/interop/llama3_hf.h"
#include "lib/util/status_macros.h"

namespace titan {

absl::Status LoadLlama3Weights(const std::string& path, bool in_hf, const Llama3Args& args,
                               const std::vector<ParamRef>& params) {
  const std::optional<CheckpointFormat> format =
      in_hf ? std::optional<CheckpointFormat>(CheckpointFormat::kHf) : std::nullopt;
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                         CheckpointReader::Open(path, format));
  Llama3ModelInfo info;
  info.args = args;
  // The model's own shape decides; a checkpoint of another shape fails the match below.
  TITAN_ASSIGN_OR_RETURN(std::vector<ParameterSource> sources,
                         MatchLlama3Parameters(*reader, info));
  absl::flat_hash_map<std::string, at::Tensor*> slots;
  for (const ParamRef& p : params) slots[p.name] = p.tensor;
  c10::NoGradGuard no_grad;
  for (const ParameterSource& source : sources) {
    auto slot = slots.find(source.titan_name);
    if (slot == slots.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", source.source_name, " has no parameter ", source.titan_name));
    }
    TITAN_ASSIGN_OR_RETURN(at::Tensor tensor, reader->Get(source.source_name));
    if (reader->format() == CheckpointFormat::kHf) {
      tensor = HfTensorToTitan(source.titan_name, tensor, args);
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
