#ifndef TITAN_LIB_TOKENIZER_TIKTOKEN_TOKENIZER_H_
#define TITAN_LIB_TOKENIZER_TIKTOKEN_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/tokenizer/bpe_tokenizer.h"

namespace titan {

// Meta's Llama 3 special tokens in id order; they take the ids right after the ranks.
std::vector<std::string> Llama3SpecialTokens();

// Loads a tiktoken rank file (Llama 3's original tokenizer.model: lines of "<base64 token> <rank>")
// with Llama 3's split regex and special tokens, <|begin_of_text|> as BOS and <|end_of_text|> as
// EOS. Encoding matches tiktoken's `encode(text, allowed_special=set(), disallowed_special=())`
// (special-token text is plain text, as torchtitan's and Meta's Llama 3 tokenizers encode) under
// SpecialTokenText::kPlain and `encode(text, allowed_special="all")` under kParse.
absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadTiktokenTokenizer(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_TIKTOKEN_TOKENIZER_H_
