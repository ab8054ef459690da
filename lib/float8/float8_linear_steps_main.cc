// Test helper: one Float8Linear forward and backward per recipe, on fixed data.
//
//   float8_linear_steps IN.safetensors OUT.safetensors
//
// IN holds "x" [..., in], "weight" [out, in] and "grad" (the output's gradient). OUT holds, for
// each recipe R emulated (E = 1), and tensorwise also through at::_scaled_mm (E = 0, the only
// scaling LibTorch's CPU kernel has): "R/E/out", "R/E/grad_x", "R/E/grad_weight".
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/float8/float8_linear.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

absl::Status Run(const std::string& in, const std::string& out) {
  TITAN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(in));
  TITAN_ASSIGN_OR_RETURN(at::Tensor x, file.Load("x"));
  TITAN_ASSIGN_OR_RETURN(at::Tensor weight, file.Load("weight"));
  TITAN_ASSIGN_OR_RETURN(at::Tensor grad, file.Load("grad"));
  NamedTensors result;
  for (Float8Recipe recipe :
       {Float8Recipe::kTensorwise, Float8Recipe::kRowwise, Float8Recipe::kRowwiseWithGwHp}) {
    for (bool emulate : {false, true}) {
      if (!emulate && recipe != Float8Recipe::kTensorwise) continue;
      const Float8LinearOptions options{recipe, emulate};
      const at::Tensor x_leaf = x.clone().set_requires_grad(true);
      const at::Tensor weight_leaf = weight.clone().set_requires_grad(true);
      const at::Tensor output = Float8Linear(x_leaf, weight_leaf, options);
      output.backward(grad);
      const std::string prefix = absl::StrCat(Float8RecipeName(recipe), "/", emulate ? 1 : 0, "/");
      result.emplace_back(prefix + "out", output.detach());
      result.emplace_back(prefix + "grad_x", x_leaf.grad());
      result.emplace_back(prefix + "grad_weight", weight_leaf.grad());
    }
  }
  return WriteSafetensors(out, result);
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " IN.safetensors OUT.safetensors\n";
    return 2;
  }
  const absl::Status status = titan::Run(argv[1], argv[2]);
  if (!status.ok()) {
    std::cerr << "float8_linear_steps: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
