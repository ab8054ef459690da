#ifndef TITAN_LIB_MODEL_INIT_H_
#define TITAN_LIB_MODEL_INIT_H_

#include <ATen/ATen.h>

namespace titan {

// In-place truncated normal N(mean, std) cut to [a, b] (absolute bounds), as torch.nn.init's
// trunc_normal_; LibTorch's C++ API has no such initialiser.
void TruncNormal_(at::Tensor& tensor, double mean, double std, double a, double b);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_INIT_H_
