#ifndef TITAN_LIB_TOKENIZER_TOKENIZER_H_
#define TITAN_LIB_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace titan {

// What Encode makes of special-token text in its input, such as "<|begin_of_text|>". Only special
// tokens are concerned: HF added tokens marked "special": false are vocabulary and always match.
enum class SpecialTokenText {
  // Plain text like any other: documents, where such text is data (torchtitan's and Meta's Llama 3
  // `encode` with allowed_special=set(); `tokenizers` with encode_special_tokens=True).
  kPlain,
  // The special token's id: text that spells special tokens on purpose, such as a chat template's
  // prompt (`tokenizers`' and `transformers`' default; tiktoken's allowed_special="all").
  kParse,
};

// What Decode makes of an id the tokenizer has no text for (out of range or unused).
enum class UnknownIds {
  // An error naming the id: where such an id is a bug (data, conversions, tests).
  kError,
  // Empty text, as `tokenizers`' decode: a model's embedding may be padded past the tokenizer
  // (Qwen3: 151936 rows, 151669 ids), and what it samples there is text-less, not an error.
  kEmpty,
};

// Text <-> token ids. Implementations: BPE from HF tokenizer.json or tiktoken rank files.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Llama 3 rules: `add_bos` prepends the BOS (when there is one), `add_eos` appends the EOS.
  virtual std::vector<int32_t> Encode(absl::string_view text, bool add_bos, bool add_eos,
                                      SpecialTokenText special_text) const = 0;
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                             UnknownIds unknown) const = 0;
  // An unknown id is an error.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const {
    return Decode(ids, UnknownIds::kError);
  }

  // None for a tokenizer without BOS (Qwen's layout: tokenizer_config.json says bos_token null).
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // Number of ids the model's embedding must cover (largest id + 1, special tokens included).
  virtual int64_t vocab_size() const = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_TOKENIZER_H_
