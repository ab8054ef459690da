#ifndef TITAN_LIB_RL_GENERATOR_H_
#define TITAN_LIB_RL_GENERATOR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/decoder.h"
#include "lib/parallel/data_parallel.h"

namespace titan {

using TokenIds = std::vector<int64_t>;

// Prompts and responses in one batch, laid out as the generator decodes them and the trainer
// recomputes them (batch-invariant mode gives a token the same bits however wide the batch): each
// prompt left-padded to the longest, its response after it, padding after the response.
// [B, P + T].
struct SequenceBatch {
  at::Tensor tokens;         // int64; pad_id on padding
  at::Tensor valid;          // bool; false on the left padding (no query attends to it)
  at::Tensor positions;      // int64 RoPE positions: 0 at each prompt's first token
  int64_t prompt_len = 0;    // P
  at::Tensor response_mask;  // bool [B, T]: response tokens (stop token included)

  // Rows [begin, end) of every tensor (views).
  SequenceBatch Rows(int64_t begin, int64_t end) const;
};

// The tokens of `prompts` with `responses`, padding not counted.
int64_t SequenceTokens(const std::vector<TokenIds>& prompts,
                       const std::vector<TokenIds>& responses);

// The layout of `prompts` with `responses` (T = the longest response, or `response_len` if
// larger) on `device`.
SequenceBatch LayOutSequences(const std::vector<TokenIds>& prompts,
                              const std::vector<TokenIds>& responses, int64_t pad_id,
                              const at::Device& device, int64_t response_len = 0);

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no cut
  double top_p = 1.0;        // 1: no cut
  TokenIds stop_tokens;      // a response ends after the first of these (kept in the response)
  int64_t pad_id = 0;
  uint64_t seed = 0;         // sampling draws from its own generator: seeded, reproducible
  // Non-empty: row i draws from a generator of its own, seeded row_seeds[i] (one per row), so
  // that its samples do not depend on the other rows of the batch; `seed` is then not read.
  std::vector<uint64_t> row_seeds;
};

// A seed for row `row` of a run seeded `seed` (SplitMix64's mix): rows and seeds draw apart.
uint64_t RowSeed(uint64_t seed, uint64_t row);

struct Generation {
  std::vector<TokenIds> prompts;      // the prompts' ids, as given
  SequenceBatch batch;                // prompts and responses, T = max_new_tokens
  std::vector<TokenIds> responses;    // generated ids, stop token included
  std::vector<bool> stopped;          // ended by a stop token (else by max_new_tokens)
  at::Tensor logprobs;                // float [B, T]: log-probability of each sampled token
                                      // under softmax(logits / temperature) (greedy: T = 1)
  int64_t decode_steps = 0;           // forwards after the prompt's
};

// The generator sampling draws from on `device`: its own, seeded with `seed`.
at::Generator SamplingGenerator(const at::Device& device, uint64_t seed);

// One next token per row of `logits` [B, V] and its log-probability (out), as `options` say;
// drawn on the logits' device, from `generator` (of that device).
at::Tensor SampleNext(const at::Tensor& logits, const SamplingOptions& options,
                      at::Generator& generator, at::Tensor* logprobs);

// As SampleNext, row i drawing from `generators`[i] alone (one per row of `logits`).
at::Tensor SampleNextPerRow(const at::Tensor& logits, const SamplingOptions& options,
                            std::vector<at::Generator>& generators, at::Tensor* logprobs);

// Decodes `prompts` as one left-padded batch with a KV cache: a prompt forward, then one token
// per forward until every row has stopped (read every 8 tokens) or max_new_tokens. `all_stopped`
// (optional, called at those reads) turns this rank's "every row stopped" into the job's: with
// FSDP every rank must run as many forwards (data-parallel generation over a sharded policy).
// The model runs under `data_parallel`'s Forward, without autograd. Logits that are not finite
// (diverged weights) fail it as an AbortedError, read once the batch is done.
absl::StatusOr<Generation> Generate(
    Decoder& model, DataParallel& data_parallel, const std::vector<TokenIds>& prompts,
    const SamplingOptions& options,
    const std::function<absl::StatusOr<bool>(bool)>& all_stopped = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_RL_GENERATOR_H_
