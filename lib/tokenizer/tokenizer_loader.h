#ifndef TITAN_LIB_TOKENIZER_TOKENIZER_LOADER_H_
#define TITAN_LIB_TOKENIZER_TOKENIZER_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/tokenizer/tokenizer.h"

namespace titan {

// Loads the tokenizer at `path`: a directory holding tokenizer.json (with tokenizer_config.json
// when present), original/tokenizer.model or tokenizer.model (tiktoken ranks, tried in that
// order), or one such file (*.json is read as tokenizer.json, anything else as tiktoken ranks).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// Whether LoadTokenizer reads the file (not directory) `path` as a tokenizer.json: a *.json name.
bool IsTokenizerJsonName(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_TOKENIZER_LOADER_H_
