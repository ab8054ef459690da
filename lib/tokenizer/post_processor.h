#ifndef TITAN_LIB_TOKENIZER_POST_PROCESSOR_H_
#define TITAN_LIB_TOKENIZER_POST_PROCESSOR_H_

// tokenizer.json's post_processor: the special tokens transformers' encode with
// add_special_tokens=True puts around a text, which name the BOS and EOS where no
// tokenizer_config.json does.

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/tokenizer/added_tokens.h"
#include "lib/tokenizer/bpe_tokenizer.h"
#include "lib/tokenizer/config_tokens.h"

namespace titan {

// The special tokens of a post_processor's single-text template.
struct TemplateTokens {
  std::string source;               // Such as "post_processor TemplateProcessing", for the log.
  std::vector<std::string> before;  // Before the text ($A), in order.
  std::vector<std::string> after;   // After it.
};

// The tokens tokenizer.json's post_processor adds (TemplateProcessing, RobertaProcessing,
// BertProcessing, alone or in a Sequence, whose first such processor counts); nullopt where there
// is none, it adds none (ByteLevel) or its type is unknown (warned about).
absl::StatusOr<std::optional<TemplateTokens>> ReadPostProcessor(const Json& root,
                                                                const JsonErrors& errors);

// Makes `names`, the template's tokens `where` ("before $A" for the BOS, "after $A" for the EOS),
// the `choice`: one token is it; none is no token if `none_is_choice` (a BOS: transformers adds
// none), else `choice` stays; several keep `choice` with a warning (titan adds one).
absl::Status TakeTemplateToken(const std::vector<std::string>& names, const TemplateTokens& tokens,
                               const char* where, bool none_is_choice, const BpeModel& model,
                               const absl::flat_hash_map<std::string, int32_t>& vocab,
                               const JsonErrors& errors, SpecialChoice* choice);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_POST_PROCESSOR_H_
