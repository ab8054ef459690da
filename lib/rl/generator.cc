#include "lib/rl/generator.h"

#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/model/autocast.h"
#include "lib/rl/losses.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Tokens between two reads of "every row stopped" on the host: a read after each token would
// stall the device's queue at every step; a batch decodes at most this many tokens too many.
constexpr int64_t kStopCheckInterval = 8;

}  // namespace

SequenceBatch SequenceBatch::Rows(int64_t begin, int64_t end) const {
  SequenceBatch out = *this;
  out.tokens = tokens.slice(0, begin, end);
  out.valid = valid.slice(0, begin, end);
  out.positions = positions.slice(0, begin, end);
  out.response_mask = response_mask.slice(0, begin, end);
  return out;
}

int64_t SequenceTokens(const std::vector<TokenIds>& prompts,
                       const std::vector<TokenIds>& responses) {
  int64_t tokens = 0;
  for (const TokenIds& ids : prompts) tokens += static_cast<int64_t>(ids.size());
  for (const TokenIds& ids : responses) tokens += static_cast<int64_t>(ids.size());
  return tokens;
}

SequenceBatch LayOutSequences(const std::vector<TokenIds>& prompts,
                              const std::vector<TokenIds>& responses, int64_t pad_id,
                              const at::Device& device, int64_t response_len) {
  const int64_t rows = static_cast<int64_t>(prompts.size());
  int64_t p = 1;
  for (const TokenIds& prompt : prompts) p = std::max<int64_t>(p, prompt.size());
  int64_t t = response_len;
  for (const TokenIds& response : responses) t = std::max<int64_t>(t, response.size());
  at::Tensor tokens = at::full({rows, p + t}, pad_id, at::kLong);
  at::Tensor valid = at::ones({rows, p + t}, at::kBool);
  at::Tensor response_mask = at::zeros({rows, t}, at::kBool);
  auto token = tokens.accessor<int64_t, 2>();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t offset = p - static_cast<int64_t>(prompts[i].size());
    valid[i].slice(0, 0, offset).fill_(false);
    for (size_t j = 0; j < prompts[i].size(); ++j) token[i][offset + j] = prompts[i][j];
    if (i < static_cast<int64_t>(responses.size())) {
      for (size_t j = 0; j < responses[i].size(); ++j) token[i][p + j] = responses[i][j];
      response_mask[i].slice(0, 0, responses[i].size()).fill_(true);
    }
  }
  SequenceBatch batch;
  batch.positions = (valid.cumsum(1) - 1).clamp_min(0).to(device);
  batch.tokens = tokens.to(device);
  batch.valid = valid.to(device);
  batch.response_mask = response_mask.to(device);
  batch.prompt_len = p;
  return batch;
}

at::Generator SamplingGenerator(const at::Device& device, uint64_t seed) {
  // A copy of the device's default generator, reseeded: one path for the CPU and CUDA (whose
  // generator type needs CUDA headers), and the global generator's draws stay untouched.
  at::Generator generator = at::globalContext().defaultGenerator(device).clone();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
  return generator;
}

uint64_t RowSeed(uint64_t seed, uint64_t row) {
  uint64_t z = seed ^ (row * 0x9E3779B97F4A7C15ULL + 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

namespace {

// The distribution SampleNext draws from, [B, V]: softmax(logits / temperature) after top_k and
// top_p (temperature > 0).
at::Tensor SamplingProbs(const at::Tensor& scores, const SamplingOptions& options) {
  at::Tensor filtered = scores / options.temperature;
  const double lowest = -std::numeric_limits<float>::infinity();
  if (options.top_k > 0 && options.top_k < filtered.size(-1)) {
    const at::Tensor kth = std::get<0>(filtered.topk(options.top_k, -1)).select(-1, -1);
    filtered = filtered.masked_fill(filtered < kth.unsqueeze(-1), lowest);
  }
  if (options.top_p < 1.0) {
    auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
    const at::Tensor cumulative = sorted.softmax(-1).cumsum(-1);
    // Drop a token once the ones before it already reach top_p (the first always stays).
    const at::Tensor drop_sorted = (cumulative - sorted.softmax(-1)) >= options.top_p;
    const at::Tensor drop = at::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
    filtered = filtered.masked_fill(drop, lowest);
  }
  // A row of non-finite logits (a diverged model) softmaxes to NaN, which at::multinomial refuses
  // (on CUDA by a device-side assert that ends the process): it draws uniformly instead, and its
  // NaN log-probability fails the generation once the batch is done (Generate).
  return filtered.softmax(-1).nan_to_num(1.0);
}

// Greedy (temperature 0) or drawn by `draw` from SamplingProbs, with each token's log-probability.
at::Tensor Sample(const at::Tensor& logits, const SamplingOptions& options,
                  const std::function<at::Tensor(const at::Tensor&)>& draw, at::Tensor* logprobs) {
  const at::Tensor scores = logits.to(at::kFloat);
  if (options.temperature == 0) {
    const at::Tensor next = scores.argmax(-1);
    *logprobs = TokenLogProbs(scores.unsqueeze(1), next.unsqueeze(1)).squeeze(1);
    return next;
  }
  const at::Tensor next = draw(SamplingProbs(scores, options));
  *logprobs = TokenLogProbs(scores.unsqueeze(1), next.unsqueeze(1), options.temperature).squeeze(1);
  return next;
}

}  // namespace

at::Tensor SampleNext(const at::Tensor& logits, const SamplingOptions& options,
                      at::Generator& generator, at::Tensor* logprobs) {
  // Drawn where the logits are: no [B, V] copy to the host per token.
  return Sample(
      logits, options,
      [&](const at::Tensor& probs) {
        return at::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(1);
      },
      logprobs);
}

at::Tensor SampleNextPerRow(const at::Tensor& logits, const SamplingOptions& options,
                            std::vector<at::Generator>& generators, at::Tensor* logprobs) {
  // One draw per row (a launch each on a GPU): a row's generator advances by its own draws only.
  return Sample(
      logits, options,
      [&](const at::Tensor& probs) {
        std::vector<at::Tensor> rows;
        for (int64_t i = 0; i < probs.size(0); ++i) {
          rows.push_back(at::multinomial(probs[i], 1, /*replacement=*/false, generators[i]));
        }
        return at::cat(rows);
      },
      logprobs);
}

absl::StatusOr<Generation> Generate(
    Decoder& model, DataParallel& data_parallel, const std::vector<TokenIds>& prompts,
    const SamplingOptions& options,
    const std::function<absl::StatusOr<bool>(bool)>& all_stopped) {
  const int64_t rows = static_cast<int64_t>(prompts.size());
  const TransformerArgs& args = model.args();
  const at::Device device = model.OutputWeight().device();
  Generation out;
  out.prompts = prompts;
  out.batch = LayOutSequences(prompts, {}, options.pad_id, device, options.max_new_tokens);
  const SequenceBatch& batch = out.batch;
  const int64_t p = batch.prompt_len;
  if (p + options.max_new_tokens > args.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a prompt of ", p, " tokens + ", options.max_new_tokens,
        " new ones exceed the model's RoPE range of ", args.max_seq_len, " positions"));
  }
  if (!options.row_seeds.empty() && static_cast<int64_t>(options.row_seeds.size()) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(options.row_seeds.size(), " row seeds for ",
                                                   rows, " prompts: give one per prompt"));
  }
  c10::NoGradGuard no_grad;
  at::Generator generator = SamplingGenerator(device, options.seed);
  std::vector<at::Generator> row_generators;
  for (const uint64_t seed : options.row_seeds) {
    row_generators.push_back(SamplingGenerator(device, seed));
  }
  const auto float_options = model.OutputWeight().options().dtype(at::kFloat);
  // In the dtype the layers compute keys and values in (autocast's, under mixed precision).
  const at::ScalarType cache_dtype = AutocastScope::Current(device.type())
                                         .value_or(model.OutputWeight().scalar_type());
  KvCache cache(static_cast<int64_t>(model.layer_ids().size()), rows, p + options.max_new_tokens,
                args.kv_heads(), args.head_size(),
                model.OutputWeight().options().dtype(cache_dtype));
  out.logprobs = at::zeros({rows, options.max_new_tokens}, float_options);
  out.responses.assign(rows, {});
  out.stopped.assign(rows, false);
  const at::Tensor stop_ids = at::tensor(options.stop_tokens, at::kLong).to(device);
  at::Tensor finished = at::zeros({rows}, at::TensorOptions().dtype(at::kBool).device(device));
  DecoderInputs inputs;
  inputs.positions = batch.positions.slice(1, 0, p);
  inputs.valid = batch.valid.slice(1, 0, p);
  inputs.kv_cache = &cache;
  // Only the last prompt position's logits are sampled from: no [B, p, vocab] tensor.
  at::Tensor logits = data_parallel.Forward([&] {
    return model.Head(model.ForwardHidden(batch.tokens.slice(1, 0, p), inputs).narrow(1, p - 1, 1));
  });
  for (int64_t t = 0; t < options.max_new_tokens; ++t) {
    at::Tensor logprobs;
    at::Tensor next =
        row_generators.empty()
            ? SampleNext(logits.select(1, -1), options, generator, &logprobs)
            : SampleNextPerRow(logits.select(1, -1), options, row_generators, &logprobs);
    // Rows that already stopped emit padding (not part of their response).
    next = next.masked_fill(finished, options.pad_id);
    out.logprobs.select(1, t).copy_(logprobs.masked_fill(finished, 0));
    batch.tokens.select(1, p + t).copy_(next);
    batch.response_mask.select(1, t).copy_(finished.logical_not());
    if (stop_ids.numel() > 0) finished = finished.logical_or(at::isin(next, stop_ids));
    if (t + 1 == options.max_new_tokens) break;  // on every rank: no vote
    if ((t + 1) % kStopCheckInterval == 0) {
      bool stop_all = finished.all().item<bool>();
      if (all_stopped) {
        TITAN_ASSIGN_OR_RETURN(stop_all, all_stopped(stop_all));
      }
      if (stop_all) break;
    }
    DecoderInputs step;
    step.positions = batch.positions.slice(1, p + t, p + t + 1);
    step.kv_cache = &cache;
    logits = data_parallel.Forward(
        [&] { return model.Forward(batch.tokens.slice(1, p + t, p + t + 1), step); });
    ++out.decode_steps;
  }
  // One read per batch, not per token: a non-finite logit makes its row's log-probabilities NaN.
  if (!out.logprobs.isfinite().all().item<bool>()) {
    return absl::AbortedError(
        "the model's logits are not finite (NaN or infinite): its weights have diverged");
  }
  const at::Tensor mask = batch.response_mask.cpu();
  const at::Tensor tokens = batch.tokens.cpu();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t length = mask[i].sum().item<int64_t>();
    const at::Tensor ids = tokens[i].slice(0, p, p + length).contiguous();
    out.responses[i].assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
    out.stopped[i] = length > 0 && std::find(options.stop_tokens.begin(), options.stop_tokens.end(),
                                             out.responses[i].back()) != options.stop_tokens.end();
  }
  return out;
}

}  // namespace titan
