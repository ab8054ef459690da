#ifndef TITAN_LIB_DATA_TEST_UTIL_H_
#define TITAN_LIB_DATA_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/tokenizer/tokenizer.h"

namespace titan {

// One id per byte; BOS and EOS follow the 256 byte ids.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;

  using Tokenizer::Encode;
  std::vector<int32_t> Encode(absl::string_view text, bool add_bos, bool add_eos,
                              SpecialTokenText special_text) const override;
  using Tokenizer::Decode;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     UnknownIds unknown) const override;
  std::optional<int32_t> bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
  int64_t vocab_size() const override { return 258; }
};

// TestDir(name), made: a fresh empty folder $TEST_TMPDIR/<test name>/<name>.
std::string FreshTestDir(const std::string& name);

// Writes `contents` to `path` (creating parent folders), gzip-compressed when `gzip`.
void WriteTestFile(const std::string& path, absl::string_view contents, bool gzip = false);

// JSON lines {"<field>": text} for each text.
std::string JsonLines(const std::vector<std::string>& texts, const std::string& field = "text");

// The reference packing, written independently of the dataset: all documents' tokens (BOS text
// EOS) concatenated, cut into consecutive windows of seq_len + 1, the remainder dropped.
std::vector<std::vector<int32_t>> ReferenceWindows(const std::vector<std::string>& texts,
                                                   int64_t seq_len);

}  // namespace titan

#endif  // TITAN_LIB_DATA_TEST_UTIL_H_
