#include "lib/tokenizer/tiktoken_tokenizer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "lib/util/file_util.h"

namespace titan {

std::vector<std::string> Llama3SpecialTokens() {
  constexpr int kNumSpecialTokens = 256;
  std::vector<std::string> tokens = {
      "<|begin_of_text|>",           "<|end_of_text|>",
      "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
      "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
      "<|start_header_id|>",         "<|end_header_id|>",
      "<|reserved_special_token_4|>", "<|eot_id|>",
  };
  for (int i = 5; i < kNumSpecialTokens - 5; ++i) {
    tokens.push_back(absl::StrCat("<|reserved_special_token_", i, "|>"));
  }
  return tokens;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadTiktokenTokenizer(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();

  BpeModel model;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto error = [&](absl::string_view what) {
      std::string shown(line.substr(0, 60));
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: line %d: %s (expected \"<base64 token> <rank>\", got \"%s\")", path, line_number,
          what, absl::CHexEscape(shown)));
    };
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() != 2) return error("not two fields");
    std::string bytes;
    if (fields[0].empty() || !absl::Base64Unescape(fields[0], &bytes) || bytes.empty()) {
      return error("bad base64 token");
    }
    int32_t rank = 0;
    if (!absl::SimpleAtoi(fields[1], &rank) || rank < 0) return error("bad rank");
    if (static_cast<size_t>(rank) < model.id_to_bytes.size() && model.id_to_bytes[rank].has_value()) {
      return error(absl::StrCat("rank ", rank, " repeated"));
    }
    if (!model.bytes_to_id.emplace(bytes, rank).second) return error("token repeated");
    if (static_cast<size_t>(rank) >= model.id_to_bytes.size()) model.id_to_bytes.resize(rank + 1);
    model.id_to_bytes[rank] = std::move(bytes);
  }
  const int64_t num_ranks = static_cast<int64_t>(model.bytes_to_id.size());
  if (num_ranks == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no ranks"));
  if (static_cast<int64_t>(model.id_to_bytes.size()) != num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ranks are not 0..", num_ranks - 1,
                                                   " (largest is ", model.id_to_bytes.size() - 1,
                                                   "), so special token ids would collide"));
  }
  for (int b = 0; b < 256; ++b) {
    if (!model.bytes_to_id.contains(std::string(1, static_cast<char>(b)))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: no rank for the single byte 0x%02x: every byte needs one", path, b));
    }
  }

  // tiktoken merges the adjacent pair whose concatenation has the lowest rank, so every way of
  // cutting a token into two tokens is a merge of that rank.
  for (const auto& [bytes, rank] : model.bytes_to_id) {
    for (size_t cut = 1; cut < bytes.size(); ++cut) {
      const auto left = model.bytes_to_id.find(absl::string_view(bytes).substr(0, cut));
      if (left == model.bytes_to_id.end()) continue;
      const auto right = model.bytes_to_id.find(absl::string_view(bytes).substr(cut));
      if (right == model.bytes_to_id.end()) continue;
      model.merges[{left->second, right->second}] = BpeModel::Merge{rank, rank};
    }
  }
  model.pre_tokenizer.push_back({/*add_prefix_space=*/false, std::string(kLlama3SplitRegex)});
  model.ignore_merges = true;  // tiktoken emits a piece that is a token without merging.

  const std::vector<std::string> specials = Llama3SpecialTokens();
  for (size_t i = 0; i < specials.size(); ++i) {
    const int32_t id = static_cast<int32_t>(num_ranks + i);
    model.added_tokens.push_back({specials[i], id, /*lstrip=*/false, /*rstrip=*/false,
                                  /*normalized=*/false, /*special=*/true});
    model.id_to_bytes.push_back(specials[i]);
  }
  model.bos_id = static_cast<int32_t>(num_ranks);
  model.eos_id = static_cast<int32_t>(num_ranks + 1);
  LOG(INFO) << "Tokenizer " << path << ": BOS " << specials[0] << " = " << num_ranks << ", EOS "
            << specials[1] << " = " << num_ranks + 1 << " (Llama 3's special tokens)";

  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = BpeTokenizer::Create(std::move(model));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace titan
