#ifndef TITAN_LIB_TOKENIZER_NFC_H_
#define TITAN_LIB_TOKENIZER_NFC_H_

#include <string>

#include "absl/strings/string_view.h"

namespace titan {

// Unicode Normalization Form C of UTF-8 `text`, with the Unicode data PyPI `tokenizers` uses
// (nfc_tables.inc), as a tokenizer.json's {"type": "NFC"} normalizer (Qwen2/2.5/3). Bytes that
// are not UTF-8 are kept as they are and compose with nothing.
std::string NfcNormalize(absl::string_view text);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_NFC_H_
