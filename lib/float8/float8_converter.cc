#include "lib/float8/float8_converter.h"

#include <ATen/cuda/CUDAContext.h>
#include <glog/logging.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/float8/float8_linear.h"
#include "lib/model/batch_invariant.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

bool Filtered(const std::string& name, const std::vector<std::string>& filter_fqns) {
  for (const std::string& fqn : filter_fqns) {
    if (absl::StrContains(name, fqn)) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckFloat8Support(const Float8LinearOptions& options, const at::Device& device) {
  if (BatchInvariant()) {
    return absl::InvalidArgumentError(
        "model.converters = [\"float8\"] with [debug] batch_invariant = true: float8 scales "
        "depend on the whole batch's magnitudes, so no float8 matmul is batch-invariant");
  }
  if (options.emulate) return absl::OkStatus();
  if (device.is_cuda()) {
    const cudaDeviceProp* properties = at::cuda::getDeviceProperties(device.index());
    if (properties->major * 10 + properties->minor < 89) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model.converters = [\"float8\"]: float8 matmuls need a GPU of compute capability 8.9 "
          "or later (Ada, Hopper); ",
          properties->name, " is ", properties->major, ".", properties->minor,
          ". Set [float8] emulate = true to test the recipe slowly"));
    }
    return absl::OkStatus();
  }
  // LibTorch's CPU kernel (oneDNN) scales tensorwise only and, without float8 hardware, took
  // 9 minutes for a debug-model step the emulation runs in 0.5 s: CPU runs emulate.
  return absl::FailedPreconditionError(absl::StrCat(
      "model.converters = [\"float8\"] on CPU needs [float8] emulate = true: LibTorch's CPU "
      "float8 matmul is a reference kernel about 1000x slower than the emulation (and has no "
      "rowwise scaling); recipe ",
      Float8RecipeName(options.recipe)));
}

absl::Status CheckFloat8Filters(Module& model, const std::vector<std::string>& filter_fqns) {
  const std::vector<LinearRef> linears = model.NamedLinears();
  for (const std::string& fqn : filter_fqns) {
    // Matching by substring, as torchtitan's, "" would keep every layer in high precision.
    if (fqn.empty()) {
      return absl::InvalidArgumentError(
          "[float8] filter_fqns: an empty entry matches every linear layer's name, so float8 would "
          "convert none; remove it (or the float8 converter)");
    }
    const bool matched = std::any_of(linears.begin(), linears.end(), [&](const LinearRef& linear) {
      return absl::StrContains(linear.name, fqn);
    });
    if (matched) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "[float8] filter_fqns: \"", fqn, "\" matches no linear layer's name",
        linears.empty()
            ? ""
            : absl::StrCat(" (e.g. ", linears.front().name, ", ", linears.back().name, ")")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ConvertToFloat8(Module& model,
                                                         const Float8ConverterOptions& options,
                                                         const at::Device& device) {
  TITAN_RETURN_IF_ERROR(CheckFloat8Support(options.linear, device));
  std::vector<std::string> converted;
  std::vector<std::string> misshapen;
  for (const LinearRef& linear : model.NamedLinears()) {
    if (Filtered(linear.name, options.filter_fqns)) continue;
    if (linear.weight->size(0) % 16 != 0 || linear.weight->size(1) % 16 != 0) {
      misshapen.push_back(linear.name);
      continue;
    }
    Float8LinearOptions linear_options = options.linear;
    if (options.split_dim_of) {
      linear_options.split_dim = options.split_dim_of(linear.name + ".weight");
      linear_options.reduce_max = options.reduce_max;
    }
    *linear.fn = [linear_options](const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& kept_output) {
      return Float8Linear(x, weight, linear_options, kept_output);
    };
    converted.push_back(linear.name);
  }
  if (!misshapen.empty()) {
    LOG(INFO) << "float8: kept in high precision (a weight dim is not a multiple of 16): "
              << absl::StrJoin(misshapen, ", ");
  }
  LOG(INFO) << "float8 (" << Float8RecipeName(options.linear.recipe)
            << (options.linear.emulate ? ", emulated" : "") << "): " << converted.size()
            << " linear layers converted";
  return converted;
}

}  // namespace titan
