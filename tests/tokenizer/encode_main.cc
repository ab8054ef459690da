// Encodes a JSON array of strings with titan's tokenizer and prints, as one JSON object, each
// text's ids (special-token text parsed, and as plain text without and with BOS/EOS, as the data
// loader encodes documents) and decoding, for tests/tokenizer/parity_test.py to compare with the
// Python references.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gflags/gflags.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

DEFINE_string(tokenizer, "", "Tokenizer file or directory (what LoadTokenizer accepts).");
DEFINE_string(texts, "", "JSON file holding an array of strings to encode.");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  absl::StatusOr<std::unique_ptr<titan::Tokenizer>> tokenizer = titan::LoadTokenizer(FLAGS_tokenizer);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::string> texts_json = titan::ReadFile(FLAGS_texts);
  if (!texts_json.ok()) {
    std::cerr << texts_json.status().message() << "\n";
    return 1;
  }
  const nlohmann::json texts = nlohmann::json::parse(*texts_json, nullptr, false);
  if (!texts.is_array()) {
    std::cerr << FLAGS_texts << ": expected a JSON array of strings\n";
    return 1;
  }

  nlohmann::json results = nlohmann::json::array();
  double encode_seconds = 0;
  int64_t encoded_bytes = 0;
  for (const nlohmann::json& text_json : texts) {
    const std::string text = text_json.get<std::string>();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids =
        (*tokenizer)->Encode(text, false, false, titan::SpecialTokenText::kParse);
    encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    encoded_bytes += static_cast<int64_t>(text.size());
    absl::StatusOr<std::string> decoded = (*tokenizer)->Decode(ids);
    if (!decoded.ok()) {
      std::cerr << decoded.status().message() << "\n";
      return 1;
    }
    const titan::SpecialTokenText plain = titan::SpecialTokenText::kPlain;
    results.push_back({{"ids", ids},
                       {"ids_plain", (*tokenizer)->Encode(text, false, false, plain)},
                       {"ids_plain_bos_eos", (*tokenizer)->Encode(text, true, true, plain)},
                       {"decoded", *decoded}});
  }
  const std::optional<int32_t> bos = (*tokenizer)->bos_id();
  const nlohmann::json out = {{"bos_id", bos.has_value() ? nlohmann::json(*bos) : nlohmann::json()},
                              {"eos_id", (*tokenizer)->eos_id()},
                              {"vocab_size", (*tokenizer)->vocab_size()},
                              {"encode_seconds", encode_seconds},
                              {"encoded_bytes", encoded_bytes},
                              {"results", results}};
  // Decodings that end inside a character are not UTF-8: show those bytes as U+FFFD, like Python.
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}
