#include "lib/model/batch_invariant.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace titan {
namespace {

std::atomic<bool> g_batch_invariant{false};

// `x` padded with zeros along `dim` to a multiple of `block`.
at::Tensor PadTo(const at::Tensor& x, int64_t dim, int64_t block) {
  const int64_t size = x.size(dim);
  const int64_t pad = (block - size % block) % block;
  if (pad == 0) return x;
  std::vector<int64_t> shape = x.sizes().vec();
  shape[dim] = pad;
  return at::cat({x, at::zeros(shape, x.options())}, dim);
}

}  // namespace

void SetBatchInvariant(bool enabled) { g_batch_invariant = enabled; }

bool BatchInvariant() { return g_batch_invariant.load(); }

at::Tensor BatchInvariantLinear(const at::Tensor& x, const at::Tensor& weight) {
  const int64_t rows = x.numel() / x.size(-1);
  const at::Tensor padded = PadTo(x.reshape({rows, x.size(-1)}), 0, kInvariantRowBlock);
  std::vector<at::Tensor> blocks;
  for (const at::Tensor& block : padded.split(kInvariantRowBlock)) {
    blocks.push_back(at::linear(block, weight));
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return at::cat(blocks).slice(0, 0, rows).view(shape);
}

double MaskedScore(at::ScalarType dtype) {
  if (dtype == at::kFloat) return std::numeric_limits<float>::lowest();
  if (dtype == at::kDouble) return std::numeric_limits<double>::lowest();
  return -65504.0;
}

at::Tensor BatchInvariantAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& allowed) {
  const int64_t b = q.size(0), h = q.size(1), sq = q.size(2), d = q.size(3);
  const int64_t sk = k.size(2);
  const int64_t n_rep = h / k.size(1);
  const at::Tensor keys = n_rep == 1 ? k : k.repeat_interleave(n_rep, 1);
  const at::Tensor values = n_rep == 1 ? v : v.repeat_interleave(n_rep, 1);
  at::Tensor visible = allowed;
  if (!visible.defined()) {
    const auto long_options = q.options().dtype(at::kLong);
    visible = (at::arange(sk, long_options).unsqueeze(0) <=
               at::arange(sk - sq, sk, long_options).unsqueeze(1))
                  .view({1, 1, sq, sk});
  }
  visible = PadTo(visible.expand({b, 1, sq, sk}).to(at::kBool), 3, kInvariantKeyBlock);
  // Queries: [B, H, Sq', D] -> [B·H·(Sq'/R), R, D], one fixed-shape matmul per row block.
  const at::Tensor q_blocks = PadTo(q, 2, kInvariantRowBlock);
  const int64_t sq_padded = q_blocks.size(2);
  const int64_t row_blocks = sq_padded / kInvariantRowBlock;
  const at::Tensor queries = q_blocks.reshape({b * h * row_blocks, kInvariantRowBlock, d});
  visible = PadTo(visible, 2, kInvariantRowBlock)
                .expand({b, h, sq_padded, visible.size(3)})
                .reshape({b * h * row_blocks, kInvariantRowBlock, visible.size(3)});
  const at::Tensor padded_keys = PadTo(keys, 2, kInvariantKeyBlock);
  const at::Tensor padded_values = PadTo(values, 2, kInvariantKeyBlock);
  const int64_t key_blocks = padded_keys.size(2) / kInvariantKeyBlock;
  // Each key block's keys, repeated for every query row block of its (batch, head).
  auto block_of = [&](const at::Tensor& t, int64_t i) {
    return t.slice(2, i * kInvariantKeyBlock, (i + 1) * kInvariantKeyBlock)
        .unsqueeze(2)
        .expand({b, h, row_blocks, kInvariantKeyBlock, d})
        .reshape({b * h * row_blocks, kInvariantKeyBlock, d});
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<at::Tensor> scores;
  for (int64_t i = 0; i < key_blocks; ++i) {
    // In bf16 under CUDA autocast, where fp32's lowest value would overflow masked_fill.
    at::Tensor s = at::bmm(queries, block_of(padded_keys, i).transpose(1, 2)) * scale;
    scores.push_back(s.masked_fill(
        visible.slice(2, i * kInvariantKeyBlock, (i + 1) * kInvariantKeyBlock).logical_not(),
        MaskedScore(s.scalar_type())));
  }
  // The max is exact in any order; sums and outputs accumulate block after block.
  at::Tensor row_max = scores[0].amax(-1, /*keepdim=*/true);
  for (int64_t i = 1; i < key_blocks; ++i) {
    row_max = at::maximum(row_max, scores[i].amax(-1, /*keepdim=*/true));
  }
  at::Tensor denominator;
  at::Tensor numerator;
  for (int64_t i = 0; i < key_blocks; ++i) {
    const at::Tensor e = at::exp(scores[i] - row_max);
    const at::Tensor sum = e.sum(-1, /*keepdim=*/true);
    const at::Tensor out = at::bmm(e, block_of(padded_values, i));
    denominator = i == 0 ? sum : denominator + sum;
    numerator = i == 0 ? out : numerator + out;
  }
  return (numerator / denominator)
      .view({b, h, sq_padded, d})
      .slice(2, 0, sq);
}

}  // namespace titan
