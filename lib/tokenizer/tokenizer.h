#ifndef TITAN_LIB_TOKENIZER_TOKENIZER_H_
#define TITAN_LIB_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace titan {

// Text <-> token ids. Implementations: BPE from HF tokenizer.json or tiktoken rank files.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Llama 3 rules: `add_bos` prepends <|begin_of_text|>, `add_eos` appends <|end_of_text|>.
  virtual std::vector<int32_t> Encode(absl::string_view text, bool add_bos, bool add_eos) const = 0;
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // Number of ids the model's embedding must cover (largest id + 1, special tokens included).
  virtual int64_t vocab_size() const = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_TOKENIZER_H_
