#include "lib/model/attention.h"

#include <c10/util/Exception.h>
#include <glog/logging.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "lib/model/batch_invariant.h"
#include "lib/model/op_cache.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool IsHalfType(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

// Which fused kernel SDPA runs on CUDA, logged at the first call (the shapes are the run's).
void LogSdpaBackendOnce(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const std::optional<at::Tensor>& bias, bool is_causal, bool gqa) {
  static std::once_flag logged;
  std::call_once(logged, [&] {
    static const char* const kNames[] = {"math", "flash", "efficient", "cudnn", "overrideable"};
    const int64_t choice = at::_fused_sdp_choice(q, k, v, bias, 0.0, is_causal, std::nullopt, gqa);
    LOG(INFO) << "SDPA backend: "
              << (choice >= 0 && choice < 5 ? kNames[choice] : "none (error)") << " for "
              << q.sizes() << " " << q.scalar_type();
  });
}

// Whether the selective-checkpoint path runs ATen's flash kernel (sm80+): on CUDA, half types, no
// bias, head dims flash takes, as many queries as keys (flash aligns a causal mask bottom-right,
// SDPA top-left). It takes grouped kv heads as they are, so nothing is repeated, and it is the
// fastest kernel ATen can call with its logsumexp; the efficient kernel is the rest's.
bool FlashKernelTakes(const at::Tensor& q, const at::Tensor& k,
                      const std::optional<at::Tensor>& bias) {
  return q.is_cuda() && !bias.has_value() && IsHalfType(q.scalar_type()) && q.size(-1) % 8 == 0 &&
         q.size(-1) <= 256 && q.size(2) == k.size(2);
}

// The flash kernel's output, logsumexp and random-number state (unused: no dropout, but its
// backward takes them), for dense [B, H, S, D] inputs.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> FlashKernelForward(const at::Tensor& q,
                                                                              const at::Tensor& k,
                                                                              const at::Tensor& v,
                                                                              bool is_causal) {
  auto [out, lse, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, debug_mask] =
      at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, is_causal);
  return {out, lse, seed, offset};
}

// Attention whose output and logsumexp (and, from the flash kernel, its random-number state) the
// selective-checkpoint forward kept.
struct ReplayedAttention : public torch::autograd::Function<ReplayedAttention> {
  // The mask and the kept results are constants: they travel in saved_data, not as inputs.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const std::optional<at::Tensor>& bias,
                            bool is_causal, const std::vector<at::Tensor>& kept) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["bias"] = bias;
    ctx->saved_data["is_causal"] = is_causal;
    ctx->saved_data["kept"] = kept;
    return kept[0].detach();  // a fresh tensor for autograd to attach this node to
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto s = ctx->get_saved_variables();
    const std::vector<at::Tensor> kept = ctx->saved_data["kept"].toTensorVector();
    const bool is_causal = ctx->saved_data["is_causal"].toBool();
    at::Tensor dq, dk, dv;
    if (kept.size() == 4) {
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
          grad_outputs[0], s[0], s[1], s[2], kept[0], kept[1], /*cum_seq_q=*/{}, /*cum_seq_k=*/{},
          s[0].size(2), s[1].size(2), /*dropout_p=*/0.0, is_causal, kept[2], kept[3]);
    } else {
      std::tie(dq, dk, dv) =
          AttentionKernelBackward(grad_outputs[0], s[0], s[1], s[2], kept[0], kept[1],
                                  ctx->saved_data["bias"].toOptional<at::Tensor>(), is_causal);
    }
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

// The lowest finite value where masked, not -inf: a padding query that sees no key must not turn
// into NaN and spread through 0 · NaN.
std::optional<at::Tensor> AttentionBias(const AttentionMask& mask, at::ScalarType dtype) {
  if (mask.is_causal) return std::nullopt;
  return at::zeros(mask.allowed.sizes(), mask.allowed.options().dtype(dtype))
      .masked_fill_(mask.allowed.logical_not(), MaskedScore(dtype));
}

at::Tensor RepeatKvHeads(const at::Tensor& x, int64_t n_rep) {
  return n_rep == 1 ? x : x.repeat_interleave(n_rep, /*dim=*/1);
}

namespace {

// A bias for the efficient kernel called directly: [B, H, Sq, Sk] with rows 16-element aligned,
// as at::scaled_dot_product_attention pads and broadcasts it (the kernel checks both; the CPU one
// broadcasts a [B, 1, Sq, Sk] bias itself).
std::optional<at::Tensor> EfficientKernelBias(const std::optional<at::Tensor>& bias,
                                              const at::Tensor& q, const at::Tensor& k) {
  if (!bias) return std::nullopt;
  const int64_t sk = bias->size(-1);
  const int64_t pad = (16 - sk % 16) % 16;
  const at::Tensor aligned =
      pad == 0 ? *bias : at::constant_pad_nd(*bias, {0, pad}).slice(-1, 0, sk);
  return aligned.expand({q.size(0), q.size(1), q.size(2), k.size(2)});
}

}  // namespace

std::pair<at::Tensor, at::Tensor> AttentionKernelForward(const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& v,
                                                         const std::optional<at::Tensor>& bias,
                                                         bool is_causal) {
  if (q.is_cuda()) {
    auto [out, lse, seed, offset] =
        at::_scaled_dot_product_efficient_attention(q, k, v, EfficientKernelBias(bias, q, k),
                                                    /*compute_log_sumexp=*/true,
                                                    /*dropout_p=*/0.0, is_causal);
    // The kernel pads the rows to a multiple of 32; AttentionKernelBackward pads back.
    return {out, lse.narrow(2, 0, q.size(2))};
  }
  auto [out, lse] =
      at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal, bias);
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionKernelBackward(
    const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& bias,
    bool is_causal) {
  if (q.is_cuda()) {
    // Padded as the forward kernel pads it, with +inf: those rows then weigh nothing.
    const at::Tensor padded = at::constant_pad_nd(lse, {0, (32 - lse.size(2) % 32) % 32},
                                                  std::numeric_limits<double>::infinity());
    const at::Tensor no_rng = at::zeros({}, q.options().dtype(at::kLong));
    auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
        grad, q, k, v, EfficientKernelBias(bias, q, k).value_or(at::Tensor()), out, padded, no_rng,
        no_rng, 0.0, {true, true, true, false}, is_causal);
    return {dq, dk, dv};
  }
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(grad.contiguous(), q, k, v, out,
                                                                  lse, 0.0, is_causal, bias);
}

namespace {

// One query per sequence against grouped kv heads (a decode step on a KV cache): each kv head's
// query heads become its rows, so the cache is read as it is instead of repeated per query head
// at every token. [B, H, 1, D] queries, a [B, 1, 1, Sk] bias. The attention kernel is called
// directly, not through SDPA: on sm90 SDPA picks cuDNN, whose graph cache is keyed on the key
// length, which grows by one every token (a graph built per decode step).
at::Tensor DecodeStepAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& bias) {
  const int64_t b = q.size(0), kv_heads = k.size(1), n_rep = q.size(1) / kv_heads;
  // The kernels bypass autocast: cast as autocast would for attention.
  const at::Tensor rows = AutocastInput(q).reshape({b, kv_heads, n_rep, q.size(3)});
  const at::Tensor rows_bias =
      bias.to(rows.scalar_type()).expand({bias.size(0), bias.size(1), n_rep, bias.size(3)});
  if (rows.is_cuda()) {
    LOG_FIRST_N(INFO, 1) << "decode attention: efficient kernel (called directly) for "
                         << rows.sizes() << " " << rows.scalar_type();
  }
  const at::Tensor out =
      AttentionKernelForward(rows, AutocastInput(k), AutocastInput(v), rows_bias, false).first;
  return out.reshape({b, kv_heads * n_rep, 1, v.size(3)});
}

}  // namespace

AttentionMask BuildAttentionMask(const MaskInputs& in) {
  // [B, Sq, Sk]: keys at or before the query's position.
  at::Tensor allowed = in.key_positions.unsqueeze(1) <= in.query_positions.unsqueeze(2);
  if (in.key_valid.defined()) allowed = allowed.logical_and(in.key_valid.unsqueeze(1));
  if (in.query_documents.defined()) {
    allowed = allowed.logical_and(in.key_documents.unsqueeze(1) ==
                                  in.query_documents.unsqueeze(2));
  }
  AttentionMask mask;
  mask.is_causal = false;
  mask.allowed = allowed.unsqueeze(1);
  return mask;
}

KvCache::KvCache(int64_t num_layers, int64_t batch, int64_t max_len, int64_t kv_heads,
                 int64_t head_dim, const at::TensorOptions& options)
    : batch_(batch), max_len_(max_len) {
  for (int64_t i = 0; i < num_layers; ++i) {
    keys_.push_back(at::zeros({batch, kv_heads, max_len, head_dim}, options));
    values_.push_back(at::zeros({batch, kv_heads, max_len, head_dim}, options));
  }
  const auto on_device = at::TensorOptions().device(options.device());
  positions_ = at::zeros({batch, max_len}, on_device.dtype(at::kLong));
  valid_ = at::zeros({batch, max_len}, on_device.dtype(at::kBool));
  documents_ = at::zeros({batch, max_len}, on_device.dtype(at::kLong));
}

MaskInputs KvCache::AddTokens(const at::Tensor& positions, const at::Tensor& valid,
                              const at::Tensor& documents) {
  const int64_t n = positions.size(1);
  TORCH_CHECK(length_ + n <= max_len_, "KV cache holds ", max_len_, " tokens; ", length_,
              " cached + ", n, " new do not fit");
  const int64_t end = length_ + n;
  positions_.slice(1, length_, end).copy_(positions);
  if (valid.defined()) {
    valid_.slice(1, length_, end).copy_(valid);
  } else {
    valid_.slice(1, length_, end).fill_(true);
  }
  if (documents.defined()) documents_.slice(1, length_, end).copy_(documents);
  MaskInputs mask;
  mask.query_positions = positions;
  mask.key_positions = positions_.slice(1, 0, end);
  mask.key_valid = valid_.slice(1, 0, end);
  if (documents.defined()) {
    mask.query_documents = documents;
    mask.key_documents = documents_.slice(1, 0, end);
  }
  return mask;
}

std::pair<at::Tensor, at::Tensor> KvCache::Append(int64_t layer, const at::Tensor& k,
                                                  const at::Tensor& v) {
  const int64_t end = length_ + k.size(2);
  // The cache holds what the layers compute in, which FSDP's gathered weights (param_dtype) can
  // make other than the dtype the cache was made with.
  if (keys_.at(layer).scalar_type() != k.scalar_type()) {
    keys_[layer] = keys_[layer].to(k.scalar_type());
    values_[layer] = values_[layer].to(v.scalar_type());
  }
  keys_.at(layer).slice(2, length_, end).copy_(k);
  values_.at(layer).slice(2, length_, end).copy_(v);
  return {keys_[layer].slice(2, 0, end), values_[layer].slice(2, 0, end)};
}

at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const AttentionMask& mask) {
  if (BatchInvariant()) {
    return BatchInvariantAttention(q, k, v, mask.is_causal ? at::Tensor() : mask.allowed);
  }
  const int64_t n_rep = q.size(1) / k.size(1);
  OpCache* cache = CurrentOpCache();
  if (cache == nullptr) {
    std::optional<at::Tensor> bias = AttentionBias(mask, q.scalar_type());
    if (n_rep > 1 && q.size(2) == 1 && bias.has_value()) return DecodeStepAttention(q, k, v, *bias);
    // On CPU the kv heads are repeated as for the kept path, so that SDPA runs the same flash
    // kernels with or without selective checkpointing (its GQA path is another kernel, whose bf16
    // results differ in the last bits). On CUDA with a mask or in fp32 (autocast's dtype, as SDPA
    // is on its lower-precision list) too: flash and cuDNN take grouped heads but no fp32 (flash
    // no mask either), the efficient kernel no grouped heads, which would leave the math kernel's
    // [B, H, S, S] scores.
    const bool repeat = !q.is_cuda() || bias.has_value() || !IsHalfType(AutocastDtype(q));
    const at::Tensor keys = repeat ? RepeatKvHeads(k, n_rep) : k;
    const at::Tensor values = repeat ? RepeatKvHeads(v, n_rep) : v;
    const bool grouped = !repeat && n_rep > 1;
    if (q.is_cuda()) LogSdpaBackendOnce(q, keys, values, bias, mask.is_causal, grouped);
    return at::scaled_dot_product_attention(q, keys, values, bias, /*dropout_p=*/0.0,
                                            mask.is_causal, /*scale=*/std::nullopt, grouped);
  }
  // The kernels below bypass autocast: cast as autocast would for attention.
  const at::Tensor q_in = AutocastInput(q);
  const std::optional<at::Tensor> bias = AttentionBias(mask, q_in.scalar_type());
  const bool flash = FlashKernelTakes(q_in, k, bias);
  const at::Tensor k_in = RepeatKvHeads(AutocastInput(k), flash ? 1 : n_rep);
  const at::Tensor v_in = RepeatKvHeads(AutocastInput(v), flash ? 1 : n_rep);
  const size_t kept_count = flash ? 4 : 2;
  if (CurrentOpCacheMode() == OpCache::Mode::kRecord) {
    if (q_in.is_cuda()) {
      LOG_FIRST_N(INFO, 1) << "attention kernel under op-level checkpointing: "
                           << (flash ? "flash" : "efficient") << " (called directly) for "
                           << q_in.sizes() << " " << q_in.scalar_type();
    }
    std::vector<at::Tensor> kept;
    if (flash) {
      auto [out, lse, seed, offset] = FlashKernelForward(q_in, k_in, v_in, mask.is_causal);
      kept = {out, lse, seed, offset};
    } else {
      auto [out, lse] = AttentionKernelForward(q_in, k_in, v_in, bias, mask.is_causal);
      kept = {out, lse};
    }
    for (const at::Tensor& tensor : kept) cache->Push(tensor);
    return kept[0];
  }
  std::vector<at::Tensor> kept;
  for (size_t i = 0; i < kept_count; ++i) kept.push_back(cache->Pop());
  return ReplayedAttention::apply(q_in, k_in, v_in, bias, mask.is_causal, kept);
}

}  // namespace titan
