#include "lib/model/init.h"

#include <c10/core/GradMode.h>

#include <cmath>

namespace titan {
namespace {

double NormalCdf(double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; }

}  // namespace

void TruncNormal_(at::Tensor& tensor, double mean, double std, double a, double b) {
  c10::NoGradGuard no_grad;
  // Inverse-CDF sampling: uniform over [cdf(a), cdf(b)] mapped back through erfinv.
  const double lo = NormalCdf((a - mean) / std);
  const double hi = NormalCdf((b - mean) / std);
  tensor.uniform_(2 * lo - 1, 2 * hi - 1);
  tensor.erfinv_();
  tensor.mul_(std * std::sqrt(2.0));
  tensor.add_(mean);
  tensor.clamp_(a, b);
}

}  // namespace titan
