#ifndef TITAN_LIB_TOKENIZER_HF_TOKENIZER_H_
#define TITAN_LIB_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/bpe_tokenizer.h"

namespace titan {

// Loads a Hugging Face tokenizer.json holding a byte-level BPE model (GPT-2, Llama 3 style).
// `config_path` (tokenizer_config.json, may be empty) adds its added_tokens_decoder entries that
// tokenizer.json lacks with the ids transformers' AutoTokenizer gives them (in the order of the
// config's ids: model.vocab's id for a token the vocabulary holds, else the next free id; a config
// id that differs is logged); an entry for a token tokenizer.json already lists sets its lstrip,
// rstrip and normalized, and can make it special, as AutoTokenizer applies them. A token the
// config names (its *_token keys, extra_special_tokens) is special where AutoTokenizer 5.24 makes
// it so, and one only in model.vocab becomes an added token with its vocab id; one found nowhere
// is logged and stays plain text (AutoTokenizer would give it a new id). Its bos_token and
// eos_token name the BOS and EOS as in transformers and torchtitan (bos_token null: no BOS; a
// named token that does not exist is an error). Without the config or the key, the usual names
// decide (<|begin_of_text|>, <s>, <bos>; <|end_of_text|>, </s>, <eos>, <|endoftext|>), else no
// BOS; an EOS is required. The choice is logged. Encoding matches PyPI `tokenizers`'
// `encode(text, add_special_tokens=False)`, with tokenizer_config's added tokens registered as
// `transformers` does, and with `encode_special_tokens = True` under SpecialTokenText::kPlain.
// Split regexes are Oniguruma's (as tokenizers runs them), translated to PCRE2; a construct with
// no PCRE2 equivalent (\X, [[:alpha:]], class intersection) is refused. `map_path`
// (special_tokens_map.json, may be empty) names tokens as transformers' legacy loading reads it
// where the config has no added_tokens_decoder: its bos_token ... mask_token override the
// config's (see ApplySpecialTokensMap).
absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                              const std::string& config_path,
                                                              const std::string& map_path);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_HF_TOKENIZER_H_
