#ifndef TITAN_LIB_CONFIG_ADAM_SCALARS_H_
#define TITAN_LIB_CONFIG_ADAM_SCALARS_H_

#include <string>

namespace titan {

// Why Adam's update scalars would overflow float32 with these settings, or "" where they fit. The
// for-loop and foreach updates hand ATen lr / (1 - beta1^step) (largest at step 1) and, decoupled
// (AdamW), lr * weight_decay as float32 scalars; ATen would refuse them only at the first step.
std::string AdamScalarsPastFloat32(double lr, double beta1, double weight_decay, bool decoupled);

}  // namespace titan

#endif  // TITAN_LIB_CONFIG_ADAM_SCALARS_H_
