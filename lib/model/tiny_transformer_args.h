// Tiny decoder shapes for tests.

#ifndef TITAN_LIB_MODEL_TINY_TRANSFORMER_ARGS_H_
#define TITAN_LIB_MODEL_TINY_TRANSFORMER_ARGS_H_

#include <cstdint>

#include "lib/model/transformer_args.h"

namespace titan {

// `dim` wide with 4 query heads over 2 KV heads and an FFN of 1.5 × dim: Llama 3's layout, or with
// `qwen` Qwen3's (a head size of dim / 2, independent of dim / heads; qk-norm; tied embeddings;
// rotate-half RoPE).
inline TransformerArgs TinyTransformerArgs(int64_t dim, int64_t vocab_size, int64_t max_seq_len,
                                           bool qwen = false, int64_t n_layers = 2) {
  TransformerArgs args;
  args.dim = dim;
  args.n_layers = n_layers;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = vocab_size;
  args.ffn_hidden_dim = dim * 3 / 2;
  args.max_seq_len = max_seq_len;
  if (qwen) {
    args.head_dim = dim / 2;
    args.qk_norm = true;
    args.tie_word_embeddings = true;
    args.rope.layout = RopeLayout::kRotateHalf;
  }
  return args;
}

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TINY_TRANSFORMER_ARGS_H_
