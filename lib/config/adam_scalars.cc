#include "lib/config/adam_scalars.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "lib/config/field_value.h"

namespace titan {

std::string AdamScalarsPastFloat32(double lr, double beta1, double weight_decay, bool decoupled) {
  constexpr double kFloat32Max = std::numeric_limits<float>::max();
  // The settings as written; what they compute to in 6 digits.
  const std::string range =
      absl::StrCat(" is past float32's range (", FormatNumber(kFloat32Max), ")");
  if (lr / (1 - beta1) > kFloat32Max) {
    return absl::StrCat("with beta1 ", FormatNumber(beta1),
                        " the first step's size lr / (1 - beta1) = ", lr / (1 - beta1), range);
  }
  if (decoupled && lr * weight_decay > kFloat32Max) {
    return absl::StrCat("lr times weight_decay ", FormatNumber(weight_decay), " = ",
                        lr * weight_decay, range);
  }
  return "";
}

}  // namespace titan
