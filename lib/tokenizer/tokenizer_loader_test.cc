#include "lib/tokenizer/tokenizer_loader.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/tokenizer/oniguruma_property.h"
#include "lib/tokenizer/tiktoken_tokenizer.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr SpecialTokenText kPlain = SpecialTokenText::kPlain;
constexpr SpecialTokenText kParse = SpecialTokenText::kParse;

// The committed default tokenizer (a runfile of this test).
constexpr char kDefaultTokenizer[] = "assets/default_tokenizer";

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

// A fresh directory under the test's temp dir.
std::string MakeDir(const std::string& name) {
  const std::string dir = TempDir() + "/" + name;
  EXPECT_TRUE(MakeDirectories(dir).ok()) << dir;
  return dir;
}

void Write(const std::string& path, const std::string& contents) {
  ASSERT_TRUE(WriteFileAtomically(path, contents).ok()) << path;
}

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(path);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// A rank file holding every byte plus `merged` tokens, ranks in order.
std::string RankFile(const std::vector<std::string>& merged) {
  std::string file;
  int rank = 0;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&file, absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", rank++, "\n");
  }
  for (const std::string& token : merged) {
    absl::StrAppend(&file, absl::Base64Escape(token), " ", rank++, "\n");
  }
  return file;
}

const std::vector<std::string>& TrickyTexts() {
  static const auto* const texts = new std::vector<std::string>{
      "",
      "Hello, world!",
      "  leading and trailing spaces   ",
      "I'm sure you're right, they'll say we've done it. DON'T",
      "0 7 42 123 1234 12345678 3.14159 1,000,000",
      "naïve café Ελληνικά русский",
      "日本語のテキスト 中文 한국어",
      "emoji 👍🏽 👨‍👩‍👧 🎉",
      "tabs\tand\nnewlines\n\n\r\n   \n",
      std::string(5000, ' ') + "x" + std::string(3000, '\n'),
      std::string(20000, 'a'),
      "invalid UTF-8: \xff\xfe \xc3 \xe2\x82 end",
  };
  return *texts;
}

TEST(TokenizerLoaderTest, DefaultTokenizerRoundTripsTrickyText) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& text : TrickyTexts()) {
    const std::vector<int32_t> ids = tokenizer->Encode(text, false, false, kPlain);
    for (const int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tokenizer->vocab_size());
    }
    absl::StatusOr<std::string> decoded = tokenizer->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, text);
  }
  // BPE merges: ordinary English takes fewer ids than bytes.
  EXPECT_LT(tokenizer->Encode("Once upon a time, there was a cat.", false, false, kPlain).size(),
            15);
}

TEST(TokenizerLoaderTest, ParsedSpecialTokensInTextAreSingleIds) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("<|begin_of_text|>", false, false, kParse),
              ElementsAre(tokenizer->bos_id()));
  EXPECT_THAT(tokenizer->Encode("<|end_of_text|>", false, false, kParse),
              ElementsAre(tokenizer->eos_id()));
  const std::vector<int32_t> ids =
      tokenizer->Encode("a<|end_of_text|>b<|end_of_tex", false, false, kParse);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer->eos_id()), 1);
  EXPECT_EQ(*tokenizer->Decode(ids), "a<|end_of_text|>b<|end_of_tex");
  EXPECT_EQ(*tokenizer->Decode({*tokenizer->bos_id()}), "<|begin_of_text|>");
  // The three-argument form parses (titan_rl's chat prompts).
  EXPECT_EQ(tokenizer->Encode("a<|end_of_text|>b", true, false, SpecialTokenText::kParse),
            tokenizer->Encode("a<|end_of_text|>b", true, false, kParse));
}

TEST(TokenizerLoaderTest, PlainSpecialTokenTextIsOrdinaryText) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string text : {"<|begin_of_text|>", "x <|end_of_text|><|eot_id|>y",
                                 "<|reserved_special_token_3|>\n<|begin_of_text|>"}) {
    const std::vector<int32_t> ids = tokenizer->Encode(text, true, true, kPlain);
    ASSERT_GE(ids.size(), 2u);
    // Only the added BOS and EOS are special ids; the text round-trips.
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer->bos_id()), 1) << text;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tokenizer->eos_id()), 1) << text;
    EXPECT_EQ(ids.front(), *tokenizer->bos_id());
    EXPECT_EQ(ids.back(), tokenizer->eos_id());
    EXPECT_EQ(*tokenizer->Decode(absl::MakeConstSpan(ids).subspan(1, ids.size() - 2)), text);
    EXPECT_GT(ids.size(), tokenizer->Encode(text, true, true, kParse).size()) << text;
  }
}

TEST(TokenizerLoaderTest, BosAndEosWrapTheText) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_NE(tokenizer->bos_id(), tokenizer->eos_id());
  const std::vector<int32_t> plain = tokenizer->Encode("The cat sat.", false, false, kPlain);
  std::vector<int32_t> wrapped = {*tokenizer->bos_id()};
  wrapped.insert(wrapped.end(), plain.begin(), plain.end());
  EXPECT_EQ(tokenizer->Encode("The cat sat.", true, false, kPlain), wrapped);
  wrapped.push_back(tokenizer->eos_id());
  EXPECT_EQ(tokenizer->Encode("The cat sat.", true, true, kPlain), wrapped);
  EXPECT_THAT(tokenizer->Encode("", true, true, kPlain),
              ElementsAre(tokenizer->bos_id(), tokenizer->eos_id()));
  EXPECT_THAT(tokenizer->Encode("", false, true, kPlain), ElementsAre(tokenizer->eos_id()));
}

TEST(TokenizerLoaderTest, LoadsTokenizerJsonFileDirectly) {
  std::unique_ptr<Tokenizer> from_dir = LoadOrDie(kDefaultTokenizer);
  std::unique_ptr<Tokenizer> from_file = LoadOrDie(absl::StrCat(kDefaultTokenizer, "/tokenizer.json"));
  ASSERT_NE(from_dir, nullptr);
  ASSERT_NE(from_file, nullptr);
  EXPECT_EQ(from_file->vocab_size(), from_dir->vocab_size());
  EXPECT_EQ(from_file->Encode(TrickyTexts()[3], true, true, kPlain),
            from_dir->Encode(TrickyTexts()[3], true, true, kPlain));
}

TEST(TokenizerLoaderTest, EncodesTheSameFromManyThreads) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = absl::StrJoin(TrickyTexts(), " <|end_of_text|> ");
  const std::vector<int32_t> expected = tokenizer->Encode(text, true, true, kParse);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&] { result = tokenizer->Encode(text, true, true, kParse); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

TEST(TokenizerLoaderTest, DecodeNamesTheUnknownId) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  const int32_t unknown = static_cast<int32_t>(tokenizer->vocab_size());
  absl::StatusOr<std::string> decoded = tokenizer->Decode({1, unknown});
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr(absl::StrCat("unknown token id ", unknown)));
  EXPECT_FALSE(tokenizer->Decode({-1}).ok());
}

TEST(TokenizerLoaderTest, DecodeAsksForUnknownIdsAsEmptyText) {
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(kDefaultTokenizer);
  ASSERT_NE(tokenizer, nullptr);
  // A padded embedding's ids (Qwen3 embeds 151936, its tokenizer has 151669): `tokenizers`
  // decodes them as nothing.
  const int32_t padded = static_cast<int32_t>(tokenizer->vocab_size()) + 52;
  const std::vector<int32_t> ids = tokenizer->Encode("ab", false, false, kPlain);
  std::vector<int32_t> with_padded = {padded, -1};
  with_padded.insert(with_padded.begin() + 1, ids.begin(), ids.end());
  absl::StatusOr<std::string> decoded = tokenizer->Decode(with_padded, UnknownIds::kEmpty);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, "ab");
  EXPECT_FALSE(tokenizer->Decode(with_padded, UnknownIds::kError).ok());
}

TEST(TokenizerLoaderTest, TiktokenRankFileInMetaLayout) {
  const std::string dir = MakeDir("meta_layout");
  ASSERT_TRUE(MakeDirectories(dir + "/original").ok());
  const std::vector<std::string> merged = {"he", "ll", "hell", "hello", " w", "or", " wor", " world"};
  Write(dir + "/original/tokenizer.model", RankFile(merged));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  const int32_t num_ranks = 256 + static_cast<int32_t>(merged.size());
  EXPECT_EQ(tokenizer->vocab_size(), num_ranks + 256);
  EXPECT_EQ(tokenizer->bos_id(), num_ranks);
  EXPECT_EQ(tokenizer->eos_id(), num_ranks + 1);
  // Meta's list: <|eot_id|> is the tenth special, the last reserved one is number 250.
  EXPECT_THAT(tokenizer->Encode("<|eot_id|>", false, false, kParse), ElementsAre(num_ranks + 9));
  EXPECT_THAT(tokenizer->Encode("<|reserved_special_token_250|>", false, false, kParse),
              ElementsAre(num_ranks + 255));
  // As torchtitan's and Meta's encode (allowed_special=set()): in documents, special-token text
  // is bytes. Byte ranks equal the bytes here, so the ids spell the text.
  const std::string text = "<|begin_of_text|>";
  std::vector<int32_t> bytes = {num_ranks};
  for (const char c : text) bytes.push_back(static_cast<uint8_t>(c));
  bytes.push_back(num_ranks + 1);
  EXPECT_EQ(tokenizer->Encode(text, true, true, kPlain), bytes);
  EXPECT_EQ(Llama3SpecialTokens().size(), 256);
  // A piece that is a token is one id: "hello" is rank 259, " world" rank 263.
  EXPECT_THAT(tokenizer->Encode("hello world", false, false, kPlain), ElementsAre(259, 263));
  for (const std::string& text : TrickyTexts()) {
    EXPECT_EQ(*tokenizer->Decode(tokenizer->Encode(text, false, false, kPlain)), text);
  }
}

TEST(TokenizerLoaderTest, MissingPathIsNotFoundAndNamesIt) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer("/nonexistent/titan/tok");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("/nonexistent/titan/tok"));

  const std::string empty_dir = MakeDir("empty");
  tokenizer = LoadTokenizer(empty_dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("no tokenizer.json"));
}

// Loads tokenizer.json text from a fresh directory and returns the error message.
std::string HfError(const std::string& name, const std::string& json) {
  const std::string dir = MakeDir(name);
  Write(dir + "/tokenizer.json", json);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  EXPECT_FALSE(tokenizer.ok());
  EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr(dir + "/tokenizer.json"));
  return tokenizer.ok() ? "" : std::string(tokenizer.status().message());
}

// A ByteLevel pre-tokenizer and decoder, as a tokenizer.json's keys.
constexpr char kByteLevel[] =
    R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true},
       "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true})";

TEST(TokenizerLoaderTest, MalformedTokenizerJsonErrorsSayWhatIsWrong) {
  EXPECT_THAT(HfError("bad_json", "{\"model\": {"), HasSubstr("invalid JSON"));
  EXPECT_THAT(HfError("no_vocab", absl::StrCat("{", kByteLevel, R"(, "model": {"type": "BPE"}})")),
              HasSubstr("model.vocab: missing"));
  EXPECT_THAT(HfError("vocab_array", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": []}})")),
              HasSubstr("model.vocab: expected an object"));
  EXPECT_THAT(HfError("bad_merge", absl::StrCat("{", kByteLevel,
                                                R"(, "model": {"vocab": {"a": 0, "b": 1, "ab": 2},
                                                    "merges": ["a b", "a c"]}})")),
              HasSubstr("model.merges[1]: token \"c\" is not in model.vocab"));
  EXPECT_THAT(HfError("not_bpe", R"({"model": {"type": "WordPiece", "vocab": {}}})"),
              HasSubstr("model.type: expected \"BPE\""));
  EXPECT_THAT(HfError("no_byte_level", R"({"model": {"vocab": {"a": 0}}})"),
              HasSubstr("only byte-level BPE"));
  EXPECT_THAT(HfError("lowercase", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}},
                                                    "normalizer": {"type": "Lowercase"}})")),
              HasSubstr("normalizer: expected null, {\"type\": \"NFC\"} or a Sequence of them"));
  // tokenizers would give <|x|> id 2 (model.vocab has 2 entries), "c"'s id too.
  EXPECT_THAT(HfError("added_on_vocab_gap",
                      absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0, "c": 2}},
                                   "added_tokens": [{"id": 3, "content": "<|x|>",
                                                     "special": false, "single_word": false,
                                                     "lstrip": false, "rstrip": false,
                                                     "normalized": false}]})")),
              HasSubstr("added_tokens: \"<|x|>\" would have id 2 (tokenizers' next id after "
                        "model.vocab's 2 entries), model.vocab's \"c\": an added token needs an "
                        "id of its own"));
  EXPECT_THAT(
      HfError("no_eos", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}}})")),
      HasSubstr("tokenizer.json: no EOS token (no tokenizer_config.json; none of "
                "<|end_of_text|>, </s>, <eos>, <|endoftext|>): titan needs an EOS"));
}

// `levels` nested arrays.
std::string NestedArrays(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(TokenizerLoaderTest, JsonNestedDeeperThanTokenizersAllowsIsRefusedNamingTheKey) {
  // Copied or compared whole, a value this deep would overflow the stack of nlohmann's recursion.
  constexpr int kDeep = 100'000;
  const std::string vocab = R"("model": {"vocab": {"a": 0, "</s>": 1}})";
  EXPECT_THAT(HfError("deep_pre_tokenizer",
                      absl::StrCat(R"({"pre_tokenizer": )", NestedArrays(kDeep), ", ", vocab, "}")),
              HasSubstr("tokenizer.json: pre_tokenizer: nested deeper than 127 levels"));
  EXPECT_THAT(HfError("deep_normalizer", absl::StrCat("{", kByteLevel, ", ", vocab,
                                                      R"(, "normalizer": {"type": "Sequence",
                                                      "normalizers": )",
                                                      NestedArrays(kDeep), "}}")),
              HasSubstr("tokenizer.json: normalizer: nested deeper than 127 levels"));
  EXPECT_THAT(HfError("deep_model", absl::StrCat(R"({"model": )", NestedArrays(1'000'000), "}")),
              HasSubstr("tokenizer.json: model: nested deeper than 127 levels"));
  // As serde_json, which tokenizers parses with: the root, added_tokens, its object and 124 arrays
  // (127 levels) load; one more array is refused.
  const std::string dir = MakeDir("nested_127");
  Write(dir + "/tokenizer.json",
        absl::StrCat("{", kByteLevel, ", ", vocab, R"(, "added_tokens": [{"id": 2, "content": "x",
                     "special": false, "single_word": false, "lstrip": false, "rstrip": false,
                     "normalized": false, "unused": )",
                     NestedArrays(124), "}]}"));
  EXPECT_NE(LoadOrDie(dir), nullptr);
  Write(dir + "/tokenizer.json",
        absl::StrCat("{", kByteLevel, ", ", vocab, R"(, "added_tokens": [{"id": 2, "content": "x",
                     "special": false, "single_word": false, "lstrip": false, "rstrip": false,
                     "normalized": false, "unused": )",
                     NestedArrays(125), "}]}"));
  EXPECT_THAT(std::string(LoadTokenizer(dir).status().message()),
              HasSubstr("tokenizer.json: added_tokens: nested deeper than 127 levels"));

  const std::string config_dir = MakeDir("deep_config");
  Write(config_dir + "/tokenizer.json",
        absl::StrCat("{", kByteLevel, ", ", vocab,
                     R"(, "added_tokens": [{"id": 2, "content": "<x>", "special": false,
                           "single_word": false, "lstrip": false, "rstrip": false,
                           "normalized": false}]})"));
  Write(config_dir + "/tokenizer_config.json",
        absl::StrCat(R"({"added_tokens_decoder": {"2": {"content": "<x>", "special": )",
                     NestedArrays(kDeep), "}}}"));
  EXPECT_THAT(
      std::string(LoadTokenizer(config_dir).status().message()),
      HasSubstr("tokenizer_config.json: added_tokens_decoder: nested deeper than 127 levels"));
}

TEST(TokenizerLoaderTest, ErrorsQuoteHugeStringsCutShort) {
  // Names and tokens are user data: an error shows their ends and size, not their megabytes.
  const std::string huge(1'000'000, 'x');
  const std::string vocab = R"("model": {"vocab": {"a": 0, "</s>": 1})";
  for (const auto& [name, json, error] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"huge_type",
            absl::StrCat(R"({"pre_tokenizer": {"type": ")", huge, R"("}, )", vocab, "}}"),
            "pre_tokenizer.type: unsupported pre-tokenizer \"xxx"},
           {"huge_merge",
            absl::StrCat("{", kByteLevel, ", ", vocab, R"(, "merges": ["a )", huge, R"("]}})"),
            "model.merges[0]: token \"xxx"},
           {"huge_unk",
            absl::StrCat("{", kByteLevel, ", ", vocab, R"(, "unk_token": ")", huge, R"("}})"),
            "model.unk_token: \"xxx"},
           {"huge_vocab_key",
            absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {")", huge, R"(": -1}}})"),
            "model.vocab[\"xxx"}}) {
    const std::string message = HfError(name, json);
    EXPECT_THAT(message, HasSubstr(error)) << name;
    EXPECT_THAT(message, HasSubstr("(1000000 bytes)")) << name;
    EXPECT_LT(message.size(), 1000) << name;
  }
  const std::string dir = MakeDir("huge_config_key");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel, ", ", vocab, "}}"));
  Write(dir + "/tokenizer_config.json",
        absl::StrCat(R"({"added_tokens_decoder": {")", huge, R"(": {"content": "<x>"}}})"));
  const std::string message(LoadTokenizer(dir).status().message());
  EXPECT_THAT(message, HasSubstr("added_tokens_decoder[\"xxx"));
  EXPECT_THAT(message, HasSubstr("the key is not an integer id"));
  EXPECT_LT(message.size(), 1000);
}

TEST(TokenizerLoaderTest, AddedTokensTakeTheIdsTokenizersGivesNotTheWrittenOnes) {
  // Ids as tokenizers.Tokenizer.from_file gives them (checked there, and in
  // tests/tokenizer/parity_test.py): written ids with a gap, beyond the vocab, on a vocab entry's
  // id, or on the token's own vocab entry under another id are ignored.
  const std::string dir = MakeDir("added_ids");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel,
                                              R"(, "model": {"vocab": {"a": 0, "b": 1, "</s>": 2}},
      "added_tokens": [{"id": 9, "content": "<x>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 0, "content": "<y>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 7, "content": "</s>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 4, "content": "<z>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false}]})"));
  testing::internal::CaptureStderr();
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_NE(tokenizer, nullptr);
  // The first three renumbered tokens are logged one by one, the rest counted (a file renumbered
  // wholesale would log a line per token).
  EXPECT_THAT(log, HasSubstr("added_tokens[0] \"<x>\" has id 3 (as transformers and tokenizers "
                             "give it: the next free id), not 9"));
  EXPECT_THAT(log, HasSubstr("added_tokens[2] \"</s>\" has id 2 (as transformers and tokenizers "
                             "give it: model.vocab's id), not 7"));
  EXPECT_THAT(log, Not(HasSubstr("\"<z>\" has id")));
  EXPECT_THAT(log, HasSubstr("... and 1 more added tokens have other ids than written (4 in all)"));
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->vocab_size(), 6);
  EXPECT_THAT(tokenizer->Encode("<x>a<y></s><z>b", false, false, kParse),
              ElementsAre(3, 0, 4, 2, 5, 1));
  absl::StatusOr<std::string> text = tokenizer->Decode({3, 4, 5, 2});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<x><y><z></s>");
}

TEST(TokenizerLoaderTest, AnAddedTokenListedTwiceMatchesAsItsLaterListingSays) {
  // As tokenizers.Tokenizer.from_file: the first listing's id, the later listing's lstrip/rstrip.
  const std::string dir = MakeDir("added_twice");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel,
                                              R"(, "model": {"vocab": {"a": 0, "Ġ": 1, "</s>": 2}},
      "added_tokens": [{"id": 3, "content": "<x>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 4, "content": "<x>", "special": true, "lstrip": true,
                        "rstrip": true, "single_word": false, "normalized": false}]})"));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 4);
  EXPECT_THAT(tokenizer->Encode("a <x> a", false, false, kParse), ElementsAre(0, 3, 0));
}

TEST(TokenizerLoaderTest, StrippedWhitespaceStillHoldsTheAddedTokensItStartsWith) {
  // tokenizers finds the added tokens in the raw text, then strips: "  " (rstrip) swallows the
  // next "  " and "<u>" (rstrip) the "\n", which still count; the text after such a token starts
  // where it ends (the "  " after "\n" is encoded again). Ids checked with tokenizers 0.23.3.
  const std::string dir = MakeDir("stripped_holds_tokens");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel,
                                              R"(, "model": {"vocab": {"a": 0, "b": 1, "Ġ": 2,
                                                                       "</s>": 3}},
      "added_tokens": [{"id": 4, "content": "  ", "special": false, "lstrip": false,
                        "rstrip": true, "single_word": false, "normalized": false},
                       {"id": 5, "content": "<u>", "special": true, "lstrip": false,
                        "rstrip": true, "single_word": false, "normalized": false},
                       {"id": 6, "content": "\n", "special": false, "lstrip": false,
                        "rstrip": false, "single_word": false, "normalized": false},
                       {"id": 7, "content": "<l>", "special": true, "lstrip": true,
                        "rstrip": false, "single_word": false, "normalized": false}]})"));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("a    b", false, false, kParse), ElementsAre(0, 4, 4, 1));
  EXPECT_THAT(tokenizer->Encode("<u>\nb", false, false, kParse), ElementsAre(5, 6, 1));
  EXPECT_THAT(tokenizer->Encode("<u>\n   b", false, false, kParse), ElementsAre(5, 6, 4, 1));
  EXPECT_THAT(tokenizer->Encode("a\n <l>b", false, false, kParse), ElementsAre(0, 6, 7, 1));
}

TEST(TokenizerLoaderTest, AddedTokensDecodeThroughTheByteLevelAlphabet) {
  // As tokenizers decodes them: "Ġb" is " b", like a vocab entry.
  const std::string dir = MakeDir("added_decode");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}},
      "added_tokens": [{"id": 1, "content": "</s>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 2, "content": "Ġb", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false}]})"));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<std::string> text = tokenizer->Decode({0, 2, 1});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "a b</s>");
}

TEST(TokenizerLoaderTest, BosAndEosFallBackToTokenizerConfig) {
  const std::string dir = MakeDir("config_names");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}},
      "added_tokens": [{"id": 1, "content": "[START]", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 2, "content": "[STOP]", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false}]})"));
  Write(dir + "/tokenizer_config.json",
        R"({"bos_token": "[START]", "eos_token": {"content": "[STOP]"}})");
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_THAT(tokenizer->Encode("a[STOP]", true, false, kParse), ElementsAre(1, 0, 2));
}

TEST(TokenizerLoaderTest, PlainTextStillMatchesNonSpecialAddedTokens) {
  const std::string dir = MakeDir("non_special");
  Write(dir + "/tokenizer.json",
        absl::StrCat("{", kByteLevel,
                     R"(, "model": {"vocab": {"<": 0, "|": 1, "a": 2, "b": 3, ">": 4}},
      "added_tokens": [{"id": 5, "content": "<|ab|>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 6, "content": "ab", "special": false, "normalized": false,
                        "single_word": false, "lstrip": false, "rstrip": false},
                       {"id": 7, "content": "</s>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false},
                       {"id": 8, "content": "<s>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false}]})"));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  // `tokenizers` with encode_special_tokens=True (ids checked there): special-token text is bytes
  // ("x", "/" and "s" have none and drop), and not searched again for "ab", which is vocabulary
  // and one id elsewhere.
  EXPECT_THAT(tokenizer->Encode("x<|ab|>ab</s>", false, false, kPlain),
              ElementsAre(0, 1, 2, 3, 1, 4, 6, 0, 4));
  EXPECT_THAT(tokenizer->Encode("x<|ab|>ab</s>", false, false, kParse), ElementsAre(5, 6, 7));
}

// tokenizer.json's model.vocab with the 256 bytes in GPT-2's byte-level alphabet, id = byte.
nlohmann::json ByteVocab() {
  nlohmann::json vocab = nlohmann::json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const int cp = printable ? b : next++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 = std::string(1, static_cast<char>(cp));
    } else {
      utf8 = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    vocab[utf8] = b;
  }
  return vocab;
}

// An added token as tokenizer.json and tokenizer_config.json's added_tokens_decoder spell it.
nlohmann::json AddedToken(const std::string& content, bool special) {
  return {{"content", content}, {"lstrip", false},      {"normalized", false},
          {"rstrip", false},    {"single_word", false}, {"special", special}};
}

// Qwen3's layout (byte vocabulary, no merges): its NFC normalizer, pre-tokenizer and added
// tokens, ids 256 on.
void WriteQwen3Layout(const std::string& dir, const nlohmann::json& config) {
  const std::vector<std::pair<std::string, bool>> added = {
      {"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<think>", false}};
  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json decoder = nlohmann::json::object();
  for (size_t i = 0; i < added.size(); ++i) {
    nlohmann::json token = AddedToken(added[i].first, added[i].second);
    decoder[std::to_string(256 + i)] = token;
    token["id"] = 256 + i;
    tokens.push_back(token);
  }
  const nlohmann::json json = {
      {"version", "1.0"},
      {"added_tokens", tokens},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", false},
           {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", ByteVocab()},
        {"merges", nlohmann::json::array()}}}};
  Write(dir + "/tokenizer.json", json.dump());
  nlohmann::json full_config = config;
  full_config["added_tokens_decoder"] = decoder;
  full_config["tokenizer_class"] = "Qwen2Tokenizer";
  Write(dir + "/tokenizer_config.json", full_config.dump());
}

TEST(TokenizerLoaderTest, AddedTokensMatchLeftmostLongestAmongManySharingPrefixes) {
  // tokenizers' leftmost-longest matching (ids checked with tokenizers 0.23.3): at each place the
  // longest added token, a shorter one where the longer breaks off ("<x12z"), among 2,000
  // "<y…>" tokens sharing their first bytes.
  std::vector<std::string> contents = {"</s>", "<x1", "<x1>", "<x12>", "x12>", "ab", "abc", "bcd"};
  for (int i = 0; i < 2000; ++i) contents.push_back(absl::StrCat("<y", i, ">"));
  nlohmann::json tokens = nlohmann::json::array();
  for (size_t i = 0; i < contents.size(); ++i) {
    nlohmann::json token = AddedToken(contents[i], i == 0);
    token["id"] = 256 + i;
    tokens.push_back(token);
  }
  const nlohmann::json json = {
      {"added_tokens", tokens},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", ByteVocab()}, {"merges", nlohmann::json::array()}}}};
  const std::string dir = MakeDir("leftmost_longest");
  Write(dir + "/tokenizer.json", json.dump());
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("<x12><x1>x12>abcd<x12z", false, false, kParse),
              ElementsAre(259, 258, 260, 262, 'd', 257, '2', 'z'));
  EXPECT_THAT(tokenizer->Encode("<y1999><y19><y2000><y", false, false, kParse),
              ElementsAre(264 + 1999, 264 + 19, '<', 'y', '2', '0', '0', '0', '>', '<', 'y'));
}

TEST(TokenizerLoaderTest, Qwen3InstructLayoutHasNoBosAndEndsWithImEnd) {
  const std::string dir = MakeDir("qwen3_instruct");
  WriteQwen3Layout(
      dir, {{"bos_token", nullptr}, {"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}});
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  // transformers' AutoTokenizer: bos_token_id None, eos_token_id 258.
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_id(), 258);
  EXPECT_THAT(tokenizer->Encode("hi", true, true, kPlain), ElementsAre('h', 'i', 258));
  EXPECT_THAT(tokenizer->Encode("<|im_start|>x<think>", true, false, kParse),
              ElementsAre(257, 'x', 259));
  // NFC: e and a combining acute are é (UTF-8 C3 A9), around added tokens too.
  EXPECT_THAT(tokenizer->Encode("e\u0301<|im_end|>e\u0301", false, false, kParse),
              ElementsAre(0xC3, 0xA9, 258, 0xC3, 0xA9));
  EXPECT_THAT(tokenizer->Encode("e\u0301<|im_end|>", false, false, kPlain),
              ElementsAre(0xC3, 0xA9, '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'));
}

TEST(TokenizerLoaderTest, Qwen3BaseLayoutEndsWithEndOfText) {
  const std::string dir = MakeDir("qwen3_base");
  WriteQwen3Layout(dir, {{"bos_token", nullptr}, {"eos_token", "<|endoftext|>"}});
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_id(), 256);
  EXPECT_THAT(tokenizer->Encode("", true, true, kPlain), ElementsAre(256));
}

TEST(TokenizerLoaderTest, ConfigTokensPastTheVocabularyTakeTheIdsTransformersGives) {
  // torchtitan's tests/assets/tokenizer (2025): a 2002-entry model.vocab ending with <|image|>,
  // <|begin_of_image|>, <|end_of_image|>, <|pad|>, no added_tokens, and a tokenizer_config.json
  // whose added_tokens_decoder lists those four at their vocab ids plus <|begin_of_text|> at 128000
  // and <|end_of_text|> at 128001. Here the same shape on a 256-byte vocabulary: the four at
  // 256-259. transformers 5.24's AutoTokenizer on this folder: bos_token_id 260, eos_token_id
  // 261, pad_token_id 259, len(tokenizer) 262 (vocab_size 260), the text encoded below (with
  // add_special_tokens=False) [260, 104, 105, 259, 261] and decode([260, 104, 261]) the text
  // below; torchtitan's HuggingFaceTokenizer takes the ids `tokenizers` gives them: the same.
  const std::string dir = MakeDir("config_ids_past_vocab");
  const std::vector<std::string> inside = {"<|image|>", "<|begin_of_image|>", "<|end_of_image|>",
                                           "<|pad|>"};
  nlohmann::json vocab = ByteVocab();
  nlohmann::json decoder = nlohmann::json::object();
  for (size_t i = 0; i < inside.size(); ++i) {
    vocab[inside[i]] = 256 + i;
    decoder[std::to_string(256 + i)] = AddedToken(inside[i], true);
  }
  decoder["128000"] = AddedToken("<|begin_of_text|>", true);
  decoder["128001"] = AddedToken("<|end_of_text|>", true);
  const nlohmann::json json = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  Write(dir + "/tokenizer.json", json.dump());
  const nlohmann::json config = {{"added_tokens_decoder", decoder},
                                 {"bos_token", "<|begin_of_text|>"},
                                 {"eos_token", "<|end_of_text|>"},
                                 {"pad_token", "<|pad|>"},
                                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
  Write(dir + "/tokenizer_config.json", config.dump());
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), 260);
  EXPECT_EQ(tokenizer->eos_id(), 261);
  EXPECT_EQ(tokenizer->vocab_size(), 262);
  EXPECT_THAT(tokenizer->Encode("<|begin_of_text|>hi<|pad|><|end_of_text|>", false, false, kParse),
              ElementsAre(260, 'h', 'i', 259, 261));
  absl::StatusOr<std::string> text = tokenizer->Decode({260, 'h', 261});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<|begin_of_text|>h<|end_of_text|>");
}

// A tokenizer.json of "a" and Llama 3's <|begin_of_text|>, <|end_of_text|>, <|eot_id|> (ids 1-3).
void WriteLlama3SpecialTokens(const std::string& dir) {
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}},
      "added_tokens": [{"id": 1, "content": "<|begin_of_text|>", "special": true,
                        "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false},
                       {"id": 2, "content": "<|end_of_text|>", "special": true,
                        "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false},
                       {"id": 3, "content": "<|eot_id|>", "special": true, "single_word": false,
                        "lstrip": false, "rstrip": false, "normalized": false}]})"));
}

TEST(TokenizerLoaderTest, TokenizerConfigNamesWinOverUsualNames) {
  // Llama 3.x Instruct's layout: its config ends text with <|eot_id|>, not <|end_of_text|>.
  const std::string dir = MakeDir("config_wins");
  WriteLlama3SpecialTokens(dir);
  Write(dir + "/tokenizer_config.json",
        R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})");
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 3);
  // A null bos_token means no BOS even where a usual name exists.
  Write(dir + "/tokenizer_config.json", R"({"bos_token": null, "eos_token": "<|eot_id|>"})");
  tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_THAT(tokenizer->Encode("a", true, true, kPlain), ElementsAre(0, 3));
}

// The error loading `dir` gives.
std::string LoadError(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  EXPECT_FALSE(tokenizer.ok());
  return tokenizer.ok() ? "" : std::string(tokenizer.status().message());
}

TEST(TokenizerLoaderTest, SpecialTokensMapNamesTokensWhereTheConfigHasNoAddedTokensDecoder) {
  // An older save's layout: the names live in special_tokens_map.json, which transformers reads
  // where tokenizer_config.json has no added_tokens_decoder; its values win over the config's.
  const std::string dir = MakeDir("special_tokens_map");
  WriteLlama3SpecialTokens(dir);
  Write(dir + "/tokenizer_config.json", R"({"eos_token": "<|end_of_text|>"})");
  Write(dir + "/special_tokens_map.json", R"({"eos_token": "<|eot_id|>", "bos_token": null})");
  testing::internal::CaptureStderr();
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_id(), 3);
  EXPECT_THAT(log, HasSubstr("BOS none (special_tokens_map.json bos_token is null), EOS "
                             "<|eot_id|> = 3 (special_tokens_map.json eos_token)"));

  const std::string map = dir + "/special_tokens_map.json";
  Write(map, "{bad");
  EXPECT_THAT(LoadError(dir), HasSubstr(map + ": invalid JSON: "));
  Write(map, R"({"eos_token": 5})");
  EXPECT_THAT(LoadError(dir), HasSubstr(map + ": eos_token: expected a token string"));
  Write(map, R"({"eos_token": "<zzz>"})");
  EXPECT_THAT(LoadError(dir), HasSubstr(map + ": eos_token: \"<zzz>\" is neither an added token"));
  Write(dir + "/tokenizer_config.json",
        R"({"eos_token": "<|end_of_text|>", "extra_special_tokens": {"image_token": "a"}})");
  Write(map, R"({"additional_special_tokens": ["<|eot_id|>"]})");
  EXPECT_THAT(LoadError(dir),
              HasSubstr(map + ": additional_special_tokens: not supported beside "
                              "tokenizer_config.json's extra_special_tokens object"));

  // transformers does not open the map beside an added_tokens_decoder.
  Write(dir + "/tokenizer_config.json",
        R"({"eos_token": "<|end_of_text|>", "added_tokens_decoder": {}})");
  Write(map, "{bad");
  tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->eos_id(), 2);
}

TEST(TokenizerLoaderTest, WithoutTokenizerConfigEndOfTextIsOnlyEos) {
  // GPT-2's or Qwen's tokenizer.json alone: <|endoftext|> ends documents and starts none.
  const std::string dir = MakeDir("endoftext_only");
  Write(dir + "/tokenizer.json", absl::StrCat("{", kByteLevel, R"(, "model": {"vocab": {"a": 0}},
      "added_tokens": [{"id": 1, "content": "<|endoftext|>", "special": true,
                        "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false}]})"));
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_id(), 1);
}

// Loads the Qwen3 layout with `config` and returns the error message.
std::string ConfigError(const std::string& name, const nlohmann::json& config) {
  const std::string dir = MakeDir(name);
  WriteQwen3Layout(dir, config);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  EXPECT_FALSE(tokenizer.ok());
  if (tokenizer.ok()) return "";
  const std::string message(tokenizer.status().message());
  EXPECT_THAT(message, HasSubstr(dir + "/tokenizer_config.json: ")) << message;
  return message;
}

TEST(TokenizerLoaderTest, BadBosOrEosInTokenizerConfigIsAnErrorNamingFileAndKey) {
  // Not a silent fallback to another token: the config names one that is not there.
  const std::string missing_bos =
      ConfigError("missing_bos", {{"bos_token", "<s>"}, {"eos_token", "<|im_end|>"}});
  EXPECT_THAT(missing_bos, HasSubstr("tokenizer_config.json: bos_token: \"<s>\" is neither an "
                                     "added token nor in "));
  EXPECT_THAT(missing_bos, HasSubstr("missing_bos/tokenizer.json's model.vocab"));
  EXPECT_THAT(ConfigError("missing_eos", {{"bos_token", nullptr}, {"eos_token", "</s>"}}),
              HasSubstr("eos_token: \"</s>\" is neither an added token"));
  EXPECT_THAT(ConfigError("missing_eos_content",
                          {{"eos_token", {{"content", "<eos>"}, {"special", true}}}}),
              HasSubstr("eos_token: \"<eos>\" is neither"));
  EXPECT_THAT(ConfigError("number_bos", {{"bos_token", 7}, {"eos_token", "<|im_end|>"}}),
              HasSubstr("bos_token: expected a token string, {\"content\": ...} or null, got "
                        "number 7"));
  EXPECT_THAT(ConfigError("null_eos", {{"bos_token", nullptr}, {"eos_token", nullptr}}),
              HasSubstr("tokenizer_config.json: eos_token: null, but titan needs an EOS"));
}

TEST(TokenizerLoaderTest, BosOrEosTheConfigNamesFoundNowhereIsAnErrorSayingWhy) {
  // transformers' AutoTokenizer adds such a token with a new id, growing the vocabulary past what
  // the model's embedding was trained with; titan needs the BOS's and EOS's ids: refused.
  EXPECT_THAT(ConfigError("missing_eos_reason", {{"eos_token", "</s>"}}),
              HasSubstr("(transformers would add it with a new id; titan does not grow the "
                        "vocabulary for a token name)"));
}

// The Qwen3 layout's encoding of `text` with `config`, and what loading it logged.
std::pair<std::vector<int32_t>, std::string> EncodeLogging(const std::string& name,
                                                           const nlohmann::json& config,
                                                           const std::string& text) {
  const std::string dir = MakeDir(name);
  WriteQwen3Layout(dir, config);
  testing::internal::CaptureStderr();
  std::unique_ptr<Tokenizer> tokenizer = LoadOrDie(dir);
  std::string log = testing::internal::GetCapturedStderr();
  if (tokenizer == nullptr) return {};
  return {tokenizer->Encode(text, false, false, kParse), std::move(log)};
}

TEST(TokenizerLoaderTest, EmptyNamedTokenIsNoToken) {
  // AutoTokenizer adds no "" token and its id is None: no BOS, no warning, no id taken from the
  // next token found nowhere (the Qwen3 layout's vocabulary and added tokens end at 259).
  const auto [ids, log] = EncodeLogging("empty_named",
                                        {{"bos_token", ""},
                                         {"eos_token", "<|im_end|>"},
                                         {"pad_token", ""},
                                         {"image_token", "<image>"},
                                         {"additional_special_tokens", {"", "<tool>"}}},
                                        "a");
  EXPECT_THAT(log, HasSubstr("BOS none (tokenizer_config.json bos_token is empty)"));
  EXPECT_THAT(log, Not(HasSubstr("\"\" is neither")));
  EXPECT_THAT(log, HasSubstr("image_token: \"<image>\" is neither an added token nor in "));
  EXPECT_THAT(log, HasSubstr("would add it with id 260;"));
  EXPECT_THAT(log, HasSubstr("additional_special_tokens[1]: \"<tool>\" is neither"));
  EXPECT_THAT(log, HasSubstr("would add it with id 261;"));
  EXPECT_THAT(ConfigError("empty_eos", {{"bos_token", nullptr}, {"eos_token", ""}}),
              HasSubstr("tokenizer_config.json: eos_token: empty, but titan needs an EOS"));
}

TEST(TokenizerLoaderTest, OtherTokenTheConfigNamesFoundNowhereIsWarnedAboutAndPlainText) {
  // A pad or image token a fine-tune's config names but its files lack is often never in the text:
  // titan loads the tokenizer, warns, and encodes such text as plain text (AutoTokenizer would add
  // the token with a new id: the Qwen3 layout's vocabulary and added tokens end at 259).
  const nlohmann::json qwen = {{"bos_token", nullptr}, {"eos_token", "<|im_end|>"}};
  const std::string text = "a<pad>b<image><tool><think>";
  const std::vector<int32_t> plain = EncodeLogging("named_none", qwen, text).first;
  ASSERT_FALSE(plain.empty());
  nlohmann::json missing = qwen;
  missing["pad_token"] = "<pad>";
  missing["image_token"] = "<image>";
  missing["additional_special_tokens"] = {"<think>", "<tool>", "<pad>"};
  const auto [ids, log] = EncodeLogging("named_missing", missing, text);
  EXPECT_EQ(ids, plain);
  EXPECT_THAT(log, HasSubstr("named_missing/tokenizer_config.json: pad_token: \"<pad>\" is neither "
                             "an added token nor in "));
  EXPECT_THAT(log, HasSubstr("named_missing/tokenizer.json's model.vocab: transformers would add "
                             "it with id 260; titan does not grow the vocabulary, so text holding "
                             "it encodes as plain text"));
  EXPECT_THAT(log, HasSubstr("image_token: \"<image>\" is neither an added token nor in "));
  EXPECT_THAT(log, HasSubstr("would add it with id 261;"));
  EXPECT_THAT(log, HasSubstr("additional_special_tokens[1]: \"<tool>\" is neither"));
  EXPECT_THAT(log, HasSubstr("would add it with id 262;"));
  // One warning per token: <pad> listed again adds nothing; <think> is an added token.
  EXPECT_EQ(log.find("additional_special_tokens[2]"), std::string::npos) << log;
  EXPECT_EQ(log.find("\"<think>\" is neither"), std::string::npos) << log;
  // A value that is no token is still refused.
  nlohmann::json bad_mask = qwen;
  bad_mask["mask_token"] = 3;
  EXPECT_THAT(ConfigError("bad_mask", bad_mask),
              HasSubstr("mask_token: expected a token string, {\"content\": ...} or null, got "
                        "number 3"));
}

// The default tokenizer with `key` (a JSON pointer) set to `value`, or its load error.
absl::StatusOr<std::unique_ptr<Tokenizer>> DefaultWith(const std::string& name,
                                                       const std::string& key,
                                                       const nlohmann::json& value) {
  absl::StatusOr<std::string> text = ReadFile(absl::StrCat(kDefaultTokenizer, "/tokenizer.json"));
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text);
  json[nlohmann::json::json_pointer(key)] = value;
  const std::string path = MakeDir(name) + "/tokenizer.json";
  if (absl::Status written = WriteFileAtomically(path, json.dump()); !written.ok()) return written;
  return LoadTokenizer(path);
}

// The default tokenizer with its Split regex replaced by `regex`, or its load error.
absl::StatusOr<std::unique_ptr<Tokenizer>> DefaultWithSplitRegex(const std::string& name,
                                                                 const std::string& regex) {
  return DefaultWith(name, "/pre_tokenizer/pretokenizers/0/pattern/Regex", regex);
}

// A decoder other than ByteLevel would change the text tokenizers decodes (a Replace of "a" by
// "Z" gives "bZnZnZ" for "banana"): refused, naming it, as tokenizers refuses an unknown one.
TEST(TokenizerLoaderTest, DecodersOtherThanByteLevelOrNoneAreRefused) {
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  const nlohmann::json replace = {
      {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "Z"}};
  // Without a decoder tokenizers joins the token strings by spaces, with an empty Sequence it
  // concatenates them (texts from tokenizers 0.23.3).
  for (const auto& [decoder, decoded] :
       {std::pair(byte_level, "banana aaa é<|end_of_text|>"),
        std::pair(nlohmann::json{{"type", "Sequence"}, {"decoders", {byte_level}}},
                  "banana aaa é<|end_of_text|>"),
        std::pair(nlohmann::json(nullptr), "b an an a Ġa a a Ġ Ã© <|end_of_text|>"),
        std::pair(nlohmann::json{{"type", "Sequence"}, {"decoders", nlohmann::json::array()}},
                  "bananaĠaaaĠÃ©<|end_of_text|>")}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        DefaultWith("decoder_kept", "/decoder", decoder);
    ASSERT_TRUE(tokenizer.ok()) << decoder << ": " << tokenizer.status();
    std::vector<int32_t> ids =
        (*tokenizer)->Encode("banana aaa é<|end_of_text|>", false, false, kParse);
    ids.push_back(1 << 30);  // Unknown: no text, and no space either.
    absl::StatusOr<std::string> text = (*tokenizer)->Decode(ids, UnknownIds::kEmpty);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, decoded) << decoder;
  }
  for (const auto& [decoder, error] :
       {std::pair(nlohmann::json{{"type", "Sequence"}, {"decoders", {byte_level, replace}}},
                  "decoder.decoders[1].type: unsupported decoder \"Replace\" (supported: "
                  "ByteLevel; another would change the decoded text)"),
        std::pair(nlohmann::json{{"type", "Bogus"}},
                  "decoder.type: unsupported decoder \"Bogus\" (supported: ByteLevel, or a "
                  "Sequence of it; another would change the decoded text)"),
        std::pair(nlohmann::json{{"type", "Sequence"}, {"decoders", {{{"type", "Sequence"}}}}},
                  "decoder.decoders[0].type: unsupported decoder \"Sequence\""),
        std::pair(nlohmann::json{{"type", "Sequence"}}, "decoder.decoders: expected an array"),
        std::pair(nlohmann::json("ByteLevel"), "decoder: expected an object with a \"type\"")}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        DefaultWith("decoder_refused", "/decoder", decoder);
    ASSERT_FALSE(tokenizer.ok()) << decoder;
    EXPECT_THAT(tokenizer.status().message(), HasSubstr(error)) << decoder;
  }
}

// Without tokenizer_config.json, transformers' encode with add_special_tokens=True adds the
// post_processor's tokens: the one before the text is the BOS, the one after the EOS.
TEST(TokenizerLoaderTest, WithoutTokenizerConfigThePostProcessorNamesBosAndEos) {
  const auto token = [](const std::string& name) {
    return nlohmann::json{{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
  };
  const nlohmann::json text = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", true},
                                     {"trim_offsets", false},
                                     {"use_regex", true}};
  const nlohmann::json eos_then_bos = {
      {"type", "Sequence"},
      {"processors",
       {byte_level,
        {{"type", "TemplateProcessing"},
         {"single", {token("<|end_of_text|>"), text, token("<|begin_of_text|>")}}}}}};
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      DefaultWith("post_processor", "/post_processor", eos_then_bos);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto id = [&](const char* name) {
    return (*tokenizer)->Encode(name, false, false, kParse);
  };
  EXPECT_THAT(id("<|end_of_text|>"), ElementsAre(*(*tokenizer)->bos_id()));
  EXPECT_THAT(id("<|begin_of_text|>"), ElementsAre((*tokenizer)->eos_id()));

  tokenizer = DefaultWith("post_processor_none", "/post_processor",
                          {{"type", "TemplateProcessing"}, {"single", {text}}});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->bos_id(), std::nullopt);
  EXPECT_THAT(id("<|end_of_text|>"), ElementsAre((*tokenizer)->eos_id()));

  tokenizer = DefaultWith("post_processor_bert", "/post_processor",
                          {{"type", "BertProcessing"},
                           {"sep", {"<|begin_of_text|>", 0}},
                           {"cls", {"<|end_of_text|>", 1}}});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(id("<|end_of_text|>"), ElementsAre(*(*tokenizer)->bos_id()));
  EXPECT_THAT(id("<|begin_of_text|>"), ElementsAre((*tokenizer)->eos_id()));

  tokenizer = DefaultWith("post_processor_missing", "/post_processor",
                          {{"type", "TemplateProcessing"}, {"single", {token("<nope>"), text}}});
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("post_processor: \"<nope>\" (before $A) is neither an added token nor in "
                        "model.vocab"));
}

// tokenizers refuses a tokenizer.json leaving out these keys (serde without defaults), and a merge
// that is not two strings split by one space: so does titan, naming the key, rather than guessing.
TEST(TokenizerLoaderTest, KeysTokenizersRequiresAreRequired) {
  const nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", "a+"}}},
                                {"behavior", "Isolated"},
                                {"invert", false}};
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", false}};
  const nlohmann::json added = {{"id", 2040},           {"content", "<|begin_of_text|>"},
                                {"single_word", false}, {"lstrip", false},
                                {"rstrip", false},      {"normalized", false},
                                {"special", true}};
  const auto without = [](nlohmann::json object, const char* key) {
    object.erase(key);
    return object;
  };
  std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases;
  for (const char* key : {"behavior", "invert"}) {
    cases.emplace_back("/pre_tokenizer/pretokenizers/0", without(split, key),
                       absl::StrCat("pre_tokenizer.pretokenizers[0].", key, ": missing"));
  }
  for (const char* key : {"add_prefix_space", "trim_offsets"}) {
    cases.emplace_back("/pre_tokenizer/pretokenizers/1", without(byte_level, key),
                       absl::StrCat("pre_tokenizer.pretokenizers[1].", key, ": missing"));
    cases.emplace_back("/decoder", without(byte_level, key),
                       absl::StrCat("decoder.", key, ": missing"));
  }
  for (const char* key : {"single_word", "lstrip", "rstrip", "normalized", "special"}) {
    cases.emplace_back("/added_tokens/0", without(added, key),
                       absl::StrCat("added_tokens[0].", key, ": missing (tokenizers requires it)"));
  }
  nlohmann::json null_lstrip = added;
  null_lstrip["lstrip"] = nullptr;
  cases.emplace_back("/added_tokens/0", null_lstrip,
                     "added_tokens[0].lstrip: expected a boolean, got null");
  for (const char* merge : {"Ġ t x", "Ġ  t", "Ġ t "}) {
    cases.emplace_back("/model/merges/0", merge,
                       "model.merges[0]: expected \"left right\" (one space)");
  }
  for (const auto& [pointer, value, error] : cases) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWith("required", pointer, value);
    ASSERT_FALSE(tokenizer.ok()) << pointer << " = " << value;
    EXPECT_THAT(tokenizer.status().message(), HasSubstr(error)) << pointer << " = " << value;
  }
  // use_regex may be left out (tokenizers' default: true), and a merge string "left right" stays.
  for (const auto& [pointer, value] :
       {std::pair<std::string, nlohmann::json>("/pre_tokenizer/pretokenizers/1",
                                               without(byte_level, "use_regex")),
        std::pair<std::string, nlohmann::json>("/model/merges/0", "Ġ t")}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWith("kept", pointer, value);
    EXPECT_TRUE(tokenizer.ok()) << pointer << ": " << tokenizer.status();
  }
}

// Each `cases` regex (as the default tokenizer's Split regex) is refused, the message naming it
// and then its text, followed by `suffix`.
void ExpectSplitRegexesRefused(const std::vector<std::pair<std::string, std::string>>& cases,
                               absl::string_view suffix = "") {
  for (const auto& [regex, construct] : cases) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWithSplitRegex("refused", regex);
    ASSERT_FALSE(tokenizer.ok()) << regex;
    EXPECT_THAT(tokenizer.status().message(),
                HasSubstr(absl::StrCat("pre_tokenizer.pretokenizers[0].pattern.Regex: regex /",
                                       regex, "/: ", construct, suffix)));
  }
}

// Each of `regexes`, as the default tokenizer's Split regex, loads.
void ExpectSplitRegexesLoad(const std::vector<std::string>& regexes) {
  for (const std::string& regex : regexes) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWithSplitRegex("kept", regex);
    EXPECT_TRUE(tokenizer.ok()) << regex << ": " << tokenizer.status();
  }
}

// tokenizer.json regexes are Oniguruma's (what HF tokenizers runs), not PCRE2's. Expected ids are
// PyPI tokenizers 0.23.3's: the default tokenizer.json with pretokenizers[0].pattern.Regex set to
// the regex, then Tokenizer.from_str(json).encode(text, add_special_tokens=False).ids.
TEST(TokenizerLoaderTest, SplitRegexEscapesMeanWhatTheyMeanInOniguruma) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> words = DefaultWithSplitRegex("onig_w", R"(\w+|\W)");
  ASSERT_TRUE(words.ok()) << words.status();
  // \w takes marks (U+032F, U+036F, U+0308) and connector punctuation (U+203F) into the word, but
  // not other numbers (U+2460 ①, U+09F4); a bare \w also takes the Latin-1 superscript ².
  EXPECT_THAT((*words)->Encode("cafe\u032fs", false, false, kPlain),
              ElementsAre(66, 64, 69, 68, 136, 503));
  EXPECT_THAT((*words)->Encode("cafe\u036fs", false, false, kPlain),
              ElementsAre(66, 64, 69, 68, 137, 503));
  EXPECT_THAT((*words)->Encode("na\u0308ive\u203fs", false, false, kPlain),
              ElementsAre(376, 136, 230, 748, 158, 222, 123, 82));
  EXPECT_THAT((*words)->Encode("x\u2460y", false, false, kPlain),
              ElementsAre(87, 158, 239, 254, 88));
  EXPECT_THAT((*words)->Encode("\u09f4s", false, false, kPlain), ElementsAre(156, 100, 112, 82));
  EXPECT_THAT((*words)->Encode("e=mc\u00b2s", false, false, kPlain),
              ElementsAre(68, 28, 76, 66, 126, 110, 82));

  // \h is a hex digit, not horizontal space.
  absl::StatusOr<std::unique_ptr<Tokenizer>> hex = DefaultWithSplitRegex("onig_h", R"(\h+|\H+)");
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_THAT((*hex)->Encode("face off", false, false, kPlain),
              ElementsAre(69, 64, 348, 272, 69, 69));
  EXPECT_THAT((*hex)->Encode("0xdeadbeef;", false, false, kPlain),
              ElementsAre(15, 87, 67, 645, 65, 68, 68, 69, 26));
}

// A byte vocabulary plus `merges` ("a b": token "ab", ids from 256 on), split by `regex` before
// ByteLevel: a merge across a split's boundary shows where the split falls.
// add_prefix_space starts each Split piece with a space (Ġ, id 32): the splits show in the ids.
std::unique_ptr<Tokenizer> ByteTokenizerWithSplitRegex(const std::string& name,
                                                       const std::string& regex,
                                                       const std::vector<std::string>& merges,
                                                       bool add_prefix_space = false) {
  nlohmann::json vocab = ByteVocab();
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string merged = merges[i];
    merged.erase(merged.find(' '), 1);
    vocab[merged] = 256 + i;
  }
  const nlohmann::json json = {{"added_tokens",
                                {{{"id", 256 + merges.size()},
                                  {"content", "<|endoftext|>"},
                                  {"special", true},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", false}}}},
                               {"pre_tokenizer",
                                {{"type", "Sequence"},
                                 {"pretokenizers",
                                  {{{"type", "Split"},
                                    {"pattern", {{"Regex", regex}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   {{"type", "ByteLevel"},
                                    {"add_prefix_space", add_prefix_space},
                                    {"trim_offsets", false},
                                    {"use_regex", false}}}}}},
                               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  const std::string dir = MakeDir(name);
  Write(dir + "/tokenizer.json", json.dump());
  return LoadOrDie(dir + "/tokenizer.json");
}

// Oniguruma reads a bare \w's code points below U+0100 from its Latin-1 table, where ² and ½ are
// word characters; [\w] follows Unicode, where they are not. A byte vocabulary plus the merge
// "c Â" (c, 0xC2) shows where the split falls. Expected ids: PyPI tokenizers 0.23.3 on this
// tokenizer.json (with the fields tokenizers requires added at their defaults),
// Tokenizer.from_str(json).encode(text, add_special_tokens=False).ids.
TEST(TokenizerLoaderTest, SplitRegexBareWordTakesOnigurumasLatin1Superscripts) {
  const auto load = [](const std::string& name, const std::string& regex) {
    return ByteTokenizerWithSplitRegex(name, regex, {"c \u00c2"});
  };
  std::unique_ptr<Tokenizer> bare = load("latin1_bare", R"(\w+|\W)");
  ASSERT_NE(bare, nullptr);
  EXPECT_THAT(bare->Encode("c\u00b2", false, false, kPlain), ElementsAre(256, 178));
  EXPECT_THAT(bare->Encode("[c\u00bd]", false, false, kPlain), ElementsAre('[', 256, 189, ']'));
  EXPECT_THAT(bare->Encode("c\u00a9", false, false, kPlain), ElementsAre('c', 194, 169));
  std::unique_ptr<Tokenizer> in_class = load("latin1_class", R"([\w]+|[^\w])");
  ASSERT_NE(in_class, nullptr);
  EXPECT_THAT(in_class->Encode("c\u00b2", false, false, kPlain), ElementsAre('c', 194, 178));
}

// Oniguruma's script properties are Script; PCRE2's bare script names are Script_Extensions,
// which also hold U+0363 (a combining a: Inherited, used by Latin) and U+3001 (、: Common, used by
// Han). The merges "x Í" (x, 0xCD) and "Ĺ ã" (0x97, 0xE3) span those boundaries. Expected ids:
// PyPI tokenizers 0.23.3, as above.
TEST(TokenizerLoaderTest, SplitRegexScriptsAreOnigurumasScriptNotScriptExtensions) {
  const std::vector<std::string> merges = {"x \u00cd", "\u0139 \u00e3"};
  std::unique_ptr<Tokenizer> latin =
      ByteTokenizerWithSplitRegex("script_latin", R"(\p{Latin}+|\P{Latin}+)", merges);
  ASSERT_NE(latin, nullptr);
  EXPECT_THAT(latin->Encode("x\u0363y", false, false, kPlain), ElementsAre('x', 205, 163, 'y'));
  std::unique_ptr<Tokenizer> latn_class =
      ByteTokenizerWithSplitRegex("script_latn_class", R"([\p{Latn}]+|[^\p{Latn}]+)", merges);
  ASSERT_NE(latn_class, nullptr);
  EXPECT_THAT(latn_class->Encode("x\u0363y", false, false, kPlain),
              ElementsAre('x', 205, 163, 'y'));
  std::unique_ptr<Tokenizer> not_han =
      ByteTokenizerWithSplitRegex("script_not_han", R"(\p{^Han}+|\P{^Han}+)", merges);
  ASSERT_NE(not_han, nullptr);
  EXPECT_THAT(not_han->Encode("\u5b57\u3001", false, false, kPlain),
              ElementsAre(229, 173, 151, 227, 128, 129));
}

// Oniguruma's POSIX-bracket properties and long General_Category names, which PCRE2 10.42 lacks,
// mean Oniguruma's sets: \p{Punct} is P alone ($ is a symbol), a bare \p{Word} takes ² as a bare
// \w does. Merges "$ !" and "c Â" (c, 0xC2) show where the splits fall. Expected ids: PyPI
// tokenizers 0.23.3, as above.
TEST(TokenizerLoaderTest, SplitRegexOnigurumaOnlyPropertyNamesMeanOnigurumasSets) {
  const std::vector<std::string> merges = {"$ !", "c \u00c2"};
  std::unique_ptr<Tokenizer> punct =
      ByteTokenizerWithSplitRegex("onig_punct", R"(\p{Punct}+|[^\p{Punct}]+)", merges);
  ASSERT_NE(punct, nullptr);
  EXPECT_THAT(punct->Encode("a$!b", false, false, kPlain), ElementsAre('a', '$', '!', 'b'));
  std::unique_ptr<Tokenizer> posix_punct =
      ByteTokenizerWithSplitRegex("onig_posix_punct", R"(\p{PosixPunct}+|\P{PosixPunct}+)", merges);
  ASSERT_NE(posix_punct, nullptr);
  EXPECT_THAT(posix_punct->Encode("a$!b", false, false, kPlain), ElementsAre('a', 256, 'b'));
  std::unique_ptr<Tokenizer> word =
      ByteTokenizerWithSplitRegex("onig_word", R"(\p{Word}+|\P{Word})", merges);
  ASSERT_NE(word, nullptr);
  EXPECT_THAT(word->Encode("c\u00b2", false, false, kPlain), ElementsAre(257, 178));
  std::unique_ptr<Tokenizer> word_class =
      ByteTokenizerWithSplitRegex("onig_word_class", R"([\p{word}]+|[^\p{WORD}])", merges);
  ASSERT_NE(word_class, nullptr);
  EXPECT_THAT(word_class->Encode("c\u00b2", false, false, kPlain), ElementsAre('c', 194, 178));
  for (
      const std::string regex :
      {R"(\p{Alpha}+|\p{Decimal_Number}+|[\p{Punct}\s]+|\p{^Alnum}|\P{Uppercase-Letter}|\p{Cntrl})",
       R"([\P{X_Digit}\P{graph}\p{Print}\p{blank}]+|\p{Other Letter}|\p{Combining_Mark}|\p{ASCII})"}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWithSplitRegex("onig", regex);
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  }
}

TEST(TokenizerLoaderTest, SplitRegexWithoutAPcre2EquivalentIsRefused) {
  ExpectSplitRegexesRefused(
      {{R"(\X)", R"(\X is not supported)"},
       {R"(\V+)", R"(\V is not supported)"},
       {R"([[:alpha:]]+)", "POSIX class [:alpha:] is not supported"},
       {R"([a-z&&[^aeiou]]+)", "&& inside [...] is not supported"},
       {R"([a[0-9]]+)", "[ inside [...] is not supported"},
       {R"([\W])", R"(\W inside [...] is not supported)"},
       // Oniguruma reads \pL as the letters p and L.
       {R"(\pL+|.)", R"(\pL without {NAME} is not supported (a literal p in Oniguruma)"},
       {R"([\pL]+)", R"(\pL without {NAME} is not supported)"},
       {R"([a-\pL]{2})", R"(\pL without {NAME} is not supported)"},
       {R"(\PL+)", R"(\PL without {NAME} is not supported (a literal P in Oniguruma)"},
       {R"(\pN+)", R"(\pN without {NAME} is not supported)"},
       {R"(x\p)", R"(\p without {NAME} is not supported)"},
       // PCRE2's own property names and property:value forms, which tokenizers refuses.
       {R"(\p{Xan}+)", R"(\p{Xan} is not supported (a PCRE2 property)"},
       {R"(\p{Xwd}+)", R"(\p{Xwd} is not supported)"},
       {R"(\p{Xps}+)", R"(\p{Xps} is not supported)"},
       {R"([\p{Xsp}]+)", R"(\p{Xsp} is not supported)"},
       {R"(\P{^x_uc}+)", R"(\P{^x_uc} is not supported)"},
       {R"(\p{L&}+)", R"(\p{L&} is not supported)"},
       {R"(\p{Bidi_M}+)", R"(\p{Bidi_M} is not supported)"},
       {R"(\p{sc:Greek}+)", R"(\p{sc:Greek} is not supported (PCRE2's property:value form)"},
       {R"(\p{scx:Greek}+)", R"(\p{scx:Greek} is not supported)"},
       {R"(\p{Bidi_Class:L}+)", R"(\p{Bidi_Class:L} is not supported)"},
       {R"(\p{sc=Greek}+)", R"(\p{sc=Greek} is not supported)"},
       // A complement PCRE2 spells only as [^...], which it cannot nest.
       {R"([\P{Word}a]+)",
        R"(\P{Word} is not supported (its complement has no PCRE2 spelling inside [...]))"},
       {R"([^\p{^Alnum}]+)", R"(\p{^Alnum} is not supported)"}});
  // Properties both read alike still load.
  ExpectSplitRegexesLoad(
      {R"(\p{L}+|\p{N}+|\p{Lu}|\p{^L}|\P{L}|\p{Lc}|\p{Any})",
       R"([\p{L}\p{N}]+|\p{Han}|\p{Greek}|\p{White_Space}|\p{Alphabetic}|\p{ASCII}|\p{Emoji})"});
}

// tokenizers' Oniguruma refuses a quantifier on an anchor or a lookaround, or on a (?:...) that is
// only one (or an alternation with one), even \b? ("target of repeat operator is invalid");
// PCRE2 repeats it at most once. Other groups around one may repeat (PyPI tokenizers 0.23.3
// loads the kept regexes).
TEST(TokenizerLoaderTest, SplitRegexQuantifiedAnchorOrLookaroundIsRefusedAsTokenizersDoes) {
  ExpectSplitRegexesRefused(
      {{R"((?=\p{Lu})+)", R"(the quantifier + on (?=\p{Lu}))"},
       {R"(\b*)", R"(the quantifier * on \b)"},
       {R"(\b?)", R"(the quantifier ? on \b)"},
       {R"(x^+)", "the quantifier + on ^"},
       {R"((?!x){2})", "the quantifier {2} on (?!x)"},
       {R"($?)", "the quantifier ? on $"},
       {R"(\A{,3})", R"(the quantifier {,3} on \A)"},
       {R"(a(?<=a)*)", "the quantifier * on (?<=a)"},
       {R"((?:^)+)", "the quantifier + on (?:^)"},
       {R"((?:a|(?:\B|b))+)", R"(the quantifier + on (?:a|(?:\B|b)))"},
       {R"(a|(?i)\z+)", R"(the quantifier + on \z)"},
       // A (?i) makes only the rest of its group one option node: an alternative before it
       // that is one anchor still makes the group no target.
       {R"((?:\b|(?i))+)", R"(the quantifier + on (?:\b|(?i)))"},
       {R"((?:\b|(?i)a)+)", R"(the quantifier + on (?:\b|(?i)a))"},
       {R"((?:\b|a(?i)b)+)", R"(the quantifier + on (?:\b|a(?i)b))"},
       {R"((?:(?:\b|(?i)))+)", R"(the quantifier + on (?:(?:\b|(?i))))"},
       {R"((?:\A|(?#c)(?i)x)+)", R"(the quantifier + on (?:\A|(?#c)(?i)x))"},
       {R"((?:a|\b|(?i)c)*)", R"(the quantifier * on (?:a|\b|(?i)c))"}},
      " is not supported (tokenizers' Oniguruma refuses to "
      "repeat an anchor or a lookaround)");
  ExpectSplitRegexesLoad({R"((^)+|(?:^a)+|(?i:^)+|(?>\b)*|(?:(?=a)(?=b))?|(?:^^|a)+|(?:(?i)$|a)+)",
                          R"([\b$^]+|\^+|a{2}+|x{,}|y{a}|\s+(?!\S)|\s+)",
                          R"((?:(?i)\b|\b)+|(?:a|(?i)$){2}|(?:\b(?i)|c)+)"});
}

// tokenizers' Oniguruma refuses a range from or to a class escape, property or POSIX class
// ("unmatched range specifier in char-class", "char-class value at end of range"); PCRE2 would
// range over the characters some translate to ([\h-z] as [0-9a-fA-F-z]). A - before ] or after
// a range stays literal in both (PyPI tokenizers 0.23.3 loads the kept regexes).
TEST(TokenizerLoaderTest, SplitRegexRangeFromOrToAClassEscapeIsRefusedAsTokenizersDoes) {
  ExpectSplitRegexesRefused(
      {{R"([\p{XDigit}-z]+)", R"(a range from \p{XDigit} is not supported)"},
       {R"([\p{Newline}-x]+)", R"(a range from \p{Newline} is not supported)"},
       {"[\\p{ASCII}-\u00ff]+", R"(a range from \p{ASCII} is not supported)"},
       {R"([\P{XDigit}-z]+)", R"(a range from \P{XDigit} is not supported)"},
       {R"([\P{ASCII}-z]+)", R"(a range from \P{ASCII} is not supported)"},
       {R"([\h-z]+)", R"(a range from \h is not supported)"},
       {R"([\p{L}-z])", R"(a range from \p{L} is not supported)"},
       {R"([\w-z])", R"(a range from \w is not supported)"},
       {R"([x\d-z])", R"(a range from \d is not supported)"},
       {R"([[:digit:]-z])", "a range from [:digit:] is not supported"},
       {R"([a-\p{L}])", R"(a range to \p{L} is not supported)"},
       {R"([!-\h])", R"(a range to \h is not supported)"}},
      " (tokenizers' Oniguruma refuses a class escape or property as a range ");
  ExpectSplitRegexesLoad({R"([\p{L}-]+|[\h-]|[-\w]|[^-\w]|[a-c-\w]|[a-c-\h]|[\p{XDigit}-]|[a-z])"});
}

// What PCRE2 cannot compile is refused naming the key and the regex as written; its offset is
// into the translation, which the message quotes where it differs.
TEST(TokenizerLoaderTest, SplitRegexPcre2CannotCompileIsRefusedQuotingTheRegexAsWritten) {
  ExpectSplitRegexesRefused(
      {{R"(\p{In_Basic_Latin}+)",
        R"(PCRE2 refuses it: unknown property after \P or \p at offset 18)"},
       {R"(x(?<=a+))", "PCRE2 refuses it: lookbehind assertion is not fixed length at offset 1"},
       {R"(\w(?<=a+))",
        absl::StrCat("PCRE2 refuses it: lookbehind assertion is not fixed length at offset 64 of "
                     "its translation /[",
                     kOnigWordBody, kOnigLatin1Word, "](?<=a+)/")}});
}

// Under (?i) Oniguruma case-folds a class's properties ((?i)[\p{Ll}] takes H), PCRE2 does not;
// a bare property is not folded in either, and \w, \d, \s, \h in a class agree.
TEST(TokenizerLoaderTest, SplitRegexPropertyInACaseInsensitiveClassIsRefused) {
  ExpectSplitRegexesRefused(
      {{R"((?i)[\p{Lower}]+)", R"(\p{Lower} inside [...] under (?i) is not supported)"},
       {R"((?i)[\p{Ll}]+)", R"(\p{Ll} inside [...] under (?i) is not supported)"},
       {R"((?i)[^\p{Upper}]+)", R"(\p{Upper} inside [...] under (?i) is not supported)"},
       {R"((?i:[\p{Uppercase_Letter}])+)", R"(\p{Uppercase_Letter} inside [...] under (?i))"},
       {R"(a(?i)b|[x\P{Lu}]+)", R"(\P{Lu} inside [...] under (?i))"},
       {R"((?i)(?:[\p{Lu}]))", R"(\p{Lu} inside [...] under (?i))"}});
  ExpectSplitRegexesLoad(
      {R"((?i)\p{Lu}+|[\w\d\s\h]+|(?-i)[\p{Ll}]|(?i:a)[\p{Ll}]|(?i-m:a)|(?:(?i)a)[\p{Lu}])",
       R"((?i)(?-i:[\p{Lu}]))"});
}

// In Oniguruma's Ruby syntax X{n,m}+ is (?:X{n,m})+ and X{n}? is (?:X{n})?, where PCRE2 reads a
// possessive and a lazy interval: tokenizers keeps aaaa whole (merge "aa aa": 257) and splits abc
// at each empty match. Expected ids: PyPI tokenizers 0.23.3, as above.
TEST(TokenizerLoaderTest, SplitRegexIntervalThenPlusOrQuestionMarkRepeatsTheInterval) {
  const std::vector<std::string> merges = {"a a", "aa aa", "b c", "1 2", "12 3", "4 5", "123 45"};
  for (const std::string regex : {"a{2}+", "a{2,3}+", "a{,2}+", "a{2,}+", "(?:a){2}+"}) {
    std::unique_ptr<Tokenizer> tokenizer = ByteTokenizerWithSplitRegex("interval", regex, merges);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_THAT(tokenizer->Encode("aaaaa", false, false, kPlain), ElementsAre(257, 'a')) << regex;
  }
  std::unique_ptr<Tokenizer> numbers =
      ByteTokenizerWithSplitRegex("interval_numbers", R"(\p{N}{1,3}+)", merges);
  ASSERT_NE(numbers, nullptr);
  EXPECT_THAT(numbers->Encode("12345", false, false, kPlain), ElementsAre(262));
  std::unique_ptr<Tokenizer> plain =
      ByteTokenizerWithSplitRegex("interval_plain", R"(\p{N}{1,3})", merges);
  ASSERT_NE(plain, nullptr);
  EXPECT_THAT(plain->Encode("12345", false, false, kPlain), ElementsAre(260, 261));
  std::unique_ptr<Tokenizer> optional =
      ByteTokenizerWithSplitRegex("interval_optional", "a{2}?", merges);
  ASSERT_NE(optional, nullptr);
  EXPECT_THAT(optional->Encode("abc", false, false, kPlain), ElementsAre('a', 'b', 'c'));
}

// Oniguruma reads a quantifier after a quantified item (past a comment too) as repeating the
// quantified item: a{2}{2} as (?:a{2}){2}, a+{2} as (?:a+){2}, a{3,2}* as (?:a{2,3}+)*, which
// PCRE2 refuses as written; a multi-byte character is one item. Merges "a a" (256), "aa aa",
// "aa a", "\xC3 \xA9" (é, 259: byte-level "Ã ©"), "é é", "éé éé" show the splits. Expected ids:
// PyPI tokenizers 0.23.3, as above.
TEST(TokenizerLoaderTest, SplitRegexStackedQuantifiersRepeatTheQuantifiedItem) {
  const std::vector<std::string> merges = {"a a",
                                           "aa aa",
                                           "aa a",
                                           "\u00C3 \u00A9",
                                           "\u00C3\u00A9 \u00C3\u00A9",
                                           "\u00C3\u00A9\u00C3\u00A9 \u00C3\u00A9\u00C3\u00A9"};
  const std::vector<int> split_after_four_as = {'a', ' ', 256, ' ', 258, ' ', 257, 258};
  const std::vector<int> split_after_six_as = {'a', ' ', 256, ' ', 258, ' ', 257, 256, 'a'};
  for (const auto& [regex, text, ids] :
       std::vector<std::tuple<std::string, std::string, std::vector<int>>>{
           {"a{3,2}*", "a aa aaa aaaaaaa", split_after_six_as},
           {"a{3,2}{2}", "a aa aaa aaaaaaa", split_after_six_as},
           {"a{3,2}(?#c)+", "a aa aaa aaaaaaa", split_after_six_as},
           {"a{2}{2}", "a aa aaa aaaaaaa", split_after_four_as},
           {"a+{2}", "a aa aaa aaaaaaa", split_after_four_as},
           {"a(?#c)*", "a aa aaa aaaaaaa", split_after_four_as},
           {"a{2}{2}?",
            "a aa aaa aaaaaaa",
            {'a', ' ', 'a', 'a', ' ', 'a', 'a', 'a', ' ', 257, 'a', 'a', 'a'}},
           {"\u00E9{2}{2}",
            "\u00E9 \u00E9\u00E9 \u00E9\u00E9\u00E9\u00E9 \u00E9\u00E9\u00E9\u00E9\u00E9",
            {259, ' ', 260, ' ', 261, ' ', 261, 259}},
           {"\u00E9{2}?",
            "\u00E9 \u00E9\u00E9 \u00E9\u00E9\u00E9\u00E9 \u00E9\u00E9\u00E9\u00E9\u00E9",
            {259, ' ', 260, ' ', 260, 260, ' ', 260, 260, 259}}}) {
    std::unique_ptr<Tokenizer> tokenizer = ByteTokenizerWithSplitRegex("stacked", regex, merges);
    ASSERT_NE(tokenizer, nullptr) << regex;
    EXPECT_EQ(tokenizer->Encode(text, false, false, kPlain), ids) << regex;
  }
}

// A multi-character escape (\x41, \101, \01, \cA) is one item: a quantifier after it repeats it
// whole, stacked ones too, as the character it stands for; Ruby's control escapes are X & 0x9f
// (\c1 is U+0011, PCRE2's \c1 is q). Each piece starts with a space (32), showing the splits.
TEST(TokenizerLoaderTest, SplitRegexQuantifiedEscapeRepeatsTheWholeEscape) {
  for (const auto& [escaped, literal, text] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {R"(\x41{2}{3})", "A{2}{3}", "xAAAAAAAx"},
           {R"(\x41{2}?)", "A{2}?", "xAAAx"},
           {R"(\x41+{2})", "A+{2}", "xA AAx"},
           {R"(\101{2}?b)", "A{2}?b", "AAb Ab b"},
           {R"(\01{2}?)", "\x01{2}?", "x\x01\x01\x01x"},
           {R"(\x4{2}{3})", "\x04{2}{3}", "x\x04\x04\x04\x04\x04\x04x"},
           {R"(\cA{2}{3})", "\x01{2}{3}", "x\x01\x01\x01\x01\x01\x01\x01x"},
           {R"(\cA{2}?)", "\x01{2}?", "x\x01\x01\x01x"},
           {R"(\C-a+|\c1|\C-?)", "\x01+|\x11|\x7f",
            "x\x01\x01"
            "b-a\x11q1\x7f?x"},
           {R"((a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10{2}|\1011{2})",
            "(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)j{2}|A1{2}", "abcdefghijjj A11 A1"}}) {
    std::unique_ptr<Tokenizer> ours = ByteTokenizerWithSplitRegex("escape", escaped, {}, true);
    std::unique_ptr<Tokenizer> reference =
        ByteTokenizerWithSplitRegex("escape_literal", literal, {}, true);
    ASSERT_NE(ours, nullptr) << escaped;
    ASSERT_NE(reference, nullptr) << literal;
    EXPECT_EQ(ours->Encode(text, false, false, kPlain),
              reference->Encode(text, false, false, kPlain))
        << escaped;
  }
  ExpectSplitRegexesRefused(
      {{R"(\O)", R"(the Oniguruma escape \O is not supported)"},
       {R"(a\y)", R"(the Oniguruma escape \y is not supported)"},
       {R"(\Y)", R"(the Oniguruma escape \Y is not supported)"},
       {R"(\M-a)", R"(the Oniguruma escape \M-X is not supported)"},
       {R"(\Cx)", R"(\C without -X is not supported)"},
       {R"(a\c)", R"(\c is not supported (titan translates a control escape of one ASCII)"},
       {R"(\C-\cA)", R"(\C-\ is not supported (titan translates a control escape)"}});
}

// \xHH and octal escapes above 0x7F are raw bytes in Oniguruma (\xC3\xA9 is é, a lone \xE9 is
// refused by tokenizers) and code points in PCRE2: refused; backreferences and ASCII load.
TEST(TokenizerLoaderTest, SplitRegexRawByteEscapesAreRefused) {
  const std::string why =
      " is not supported (a raw byte in Oniguruma (\\xC3\\xA9 is \u00e9), a code point in PCRE2";
  ExpectSplitRegexesRefused({{R"(\xC3\xA9)", R"(\xC3)" + why},
                             {R"(a|\xE9)", R"(\xE9)" + why},
                             {R"([\x80-\xff])", R"(\x80)" + why},
                             {R"(\303\251)", R"(\303)" + why},
                             {R"(\777)", R"(\777)" + why}});
  ExpectSplitRegexesLoad({R"(\x7F\177\x{E9}\u00e9\0\02000|(a)\1)"});
}

// A PCRE2 match failure (here its match limit, in nested repeats that may match empty, which
// Oniguruma matches: tokenizers splits é|abc) is logged once per regex naming the regex and PCRE2's
// message, not taken for no match in silence.
TEST(TokenizerLoaderTest, SplitRegexMatchErrorIsLogged) {
  const std::string regex = "[^ ]?{,3}+{0,}\u00e9";
  std::unique_ptr<Tokenizer> tokenizer = ByteTokenizerWithSplitRegex("match_error", regex, {});
  ASSERT_NE(tokenizer, nullptr);
  testing::internal::CaptureStderr();
  tokenizer->Encode("\u00e9abc", false, false, kPlain);
  const std::string first = testing::internal::GetCapturedStderr();
  EXPECT_THAT(first, HasSubstr("pre-tokenizer regex /(?:(?:(?:[^ ]?){0,3})+){0,}\u00e9/"));
  EXPECT_THAT(first, HasSubstr("/: PCRE2 failed to match at byte 0 of a 5-byte text: match limit "
                               "exceeded; the rest of the text is encoded as one piece"));
  testing::internal::CaptureStderr();
  tokenizer->Encode("\u00e9abc", false, false, kPlain);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// A lazy quantifier inside an atomic group or a possessive quantifier matches as in Oniguruma
// (PCRE2 10.42's JIT missed such matches): (?>x+?)c is xc, (?>x*?c) is x*c, Oniguruma's x+?{3,1}c
// (a possessive {1,3}) is x{3,1}c. Each piece starts with a space (32), showing the splits.
TEST(TokenizerLoaderTest, SplitRegexLazyInsideAtomicMatchesAsWithoutJit) {
  for (const auto& [regex, equivalent] : std::vector<std::pair<std::string, std::string>>{
           {"(?>x+?)c", "xc"}, {"(?>x*?c)", "x*c"}, {"x+?{3,1}c", "x{3,1}c"}}) {
    std::unique_ptr<Tokenizer> ours = ByteTokenizerWithSplitRegex("atomic", regex, {}, true);
    std::unique_ptr<Tokenizer> reference =
        ByteTokenizerWithSplitRegex("atomic_reference", equivalent, {}, true);
    ASSERT_NE(ours, nullptr) << regex;
    ASSERT_NE(reference, nullptr) << equivalent;
    for (const std::string text : {"xxc", "xxxxc", "xc xxxc"}) {
      EXPECT_EQ(ours->Encode(text, false, false, kPlain),
                reference->Encode(text, false, false, kPlain))
          << regex << " on " << text;
    }
  }
}

// Oniguruma allows a name on several groups; a \k<name> to such a name (Oniguruma matches any of
// them, PCRE2 the first one set) and a \g<name> call (tokenizers refuses it) are refused. Each
// piece starts with a space (32), showing the splits.
TEST(TokenizerLoaderTest, SplitRegexDuplicateGroupNames) {
  std::unique_ptr<Tokenizer> ours =
      ByteTokenizerWithSplitRegex("duplicate_names", "(?<n>a)(?<n>b)|(?'m'c)+(?<m>d)", {}, true);
  std::unique_ptr<Tokenizer> reference =
      ByteTokenizerWithSplitRegex("duplicate_names_reference", "(a)(b)|(c)+(d)", {}, true);
  ASSERT_NE(ours, nullptr);
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(ours->Encode("xabx ccdd", false, false, kPlain),
            reference->Encode("xabx ccdd", false, false, kPlain));
  ExpectSplitRegexesRefused(
      {{"(?<n>a)(?<n>b)\\k<n>", "\\k<n> to a name of several groups is not supported"},
       {"(?<n>a)|(?<n>b)\\g<n>", "\\g<n> to a name of several groups is not supported"}});
  ExpectSplitRegexesLoad({"(?<n>a)(?<m>b)\\k<n>\\g<m>|(?<o>a)(?<p>b)"});
}

// Oniguruma repeats up to 100000 times, PCRE2 up to 65535: an exact count over that is split in
// two factors ((?:a{35000}){2}); another count over it is refused, as is one tokenizers refuses.
TEST(TokenizerLoaderTest, SplitRegexIntervalsOverPcre2sLimit) {
  std::unique_ptr<Tokenizer> exact = ByteTokenizerWithSplitRegex("exact", "a{70000}", {"a a"});
  ASSERT_NE(exact, nullptr);
  std::vector<int> ids(35000, 256);
  ids.push_back('a');
  EXPECT_EQ(exact->Encode(std::string(70001, 'a'), false, false, kPlain), ids);
  ExpectSplitRegexesLoad({"a{100000}|b{70000,70000}|c{65535}|[ab]{66000}"});
  ExpectSplitRegexesRefused(
      {{"a{0,70000}", "the interval {0,70000} is not supported (PCRE2 repeats at most 65535"},
       {"a{70000,}", "the interval {70000,} is not supported (PCRE2 repeats at most 65535"},
       {"a{70000,3}", "the interval {70000,3} is not supported (PCRE2 repeats at most 65535"},
       {"a{65537}", "the interval {65537} is not supported (PCRE2 repeats at most 65535"},
       {"a{100001}", "the interval {100001} is not supported (tokenizers' Oniguruma refuses"},
       {"a{99999999999999999999}", "the interval {99999999999999999999} is not supported (tok"},
       {"a{,100001}", "the interval {,100001} is not supported (tokenizers' Oniguruma refuses"}});
}

// A quantifier with no item before it (at the start, after ( or |, or after an inline option,
// which starts a node the quantifier would open) is refused, as tokenizers refuses it: titan had
// dropped the option in a+(?i)+b.
TEST(TokenizerLoaderTest, SplitRegexQuantifierWithNothingToRepeatIsRefused) {
  ExpectSplitRegexesRefused(
      {{"a+(?i)+b", "the quantifier + with nothing before it"},
       {"a?(?m)?b", "the quantifier ? with nothing before it"},
       {"a{2}(?i)+b", "the quantifier + with nothing before it"},
       {"d+(?i)+", "the quantifier + with nothing before it"},
       {"()+(?m)?", "the quantifier ? with nothing before it"},
       {"a(?i){,2}", "the quantifier {,2} with nothing before it"},
       {"a|{2}", "the quantifier {2} with nothing before it"},
       {"(?#c)*a", "the quantifier * with nothing before it"}},
      " is not supported (tokenizers' Oniguruma refuses it: target of repeat operator is not "
      "specified)");
  ExpectSplitRegexesLoad({"a(?#c)+|(?i)a+|(?i:a)+|(?:a(?i))+"});
}

// An inline (?i) covers the rest of its group, later alternatives included: Oniguruma reads
// a(?i)b|c as a(?i:b|c) (a lone c is no match), PCRE2 as (?:a(?i)b)|(?i:c). Merges "c d" (256)
// and "a c" (257) show the splits. Expected ids: PyPI tokenizers 0.23.3, as above.
TEST(TokenizerLoaderTest, SplitRegexInlineOptionsCoverTheRestOfTheGroupAsInOniguruma) {
  const std::vector<std::string> merges = {"c d", "a c"};
  std::unique_ptr<Tokenizer> options =
      ByteTokenizerWithSplitRegex("inline_options", "a(?i)b|c", merges);
  ASSERT_NE(options, nullptr);
  EXPECT_THAT(options->Encode("cd acaB", false, false, kPlain),
              ElementsAre(256, ' ', 257, 'a', 'B'));
  std::unique_ptr<Tokenizer> in_group =
      ByteTokenizerWithSplitRegex("inline_options_group", "x|(?:a(?i)b|c)+", merges);
  ASSERT_NE(in_group, nullptr);
  EXPECT_THAT(in_group->Encode("cd acaB", false, false, kPlain),
              ElementsAre(256, ' ', 257, 'a', 'B'));
}

// titan applies Splits to the text, then one ByteLevel; a step after the ByteLevel would see its
// byte-level alphabet (tokenizers' ids differ), so any other order is refused.
TEST(TokenizerLoaderTest, PreTokenizersInAnOrderTitanDoesNotApplyAreRefused) {
  const std::string vocab = R"("model": {"vocab": {"a": 0, "</s>": 1}})";
  const std::string split =
      R"({"type": "Split", "pattern": {"Regex": "a+"}, "behavior": "Isolated", "invert": false})";
  const std::string byte_level =
      R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
          "use_regex": false})";
  const auto sequence = [&](const std::string& pretokenizers) {
    return absl::StrCat(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [)",
                        pretokenizers, "]}, ", vocab, "}");
  };
  const std::string after_byte_level =
      ": a pre-tokenizer after the ByteLevel is not supported (supported: Splits, then one "
      "ByteLevel, last)";
  EXPECT_THAT(HfError("byte_level_first", sequence(absl::StrCat(byte_level, ", ", split))),
              HasSubstr("pre_tokenizer.pretokenizers[1]" + after_byte_level));
  EXPECT_THAT(
      HfError("two_byte_levels", sequence(absl::StrCat(split, ", ", byte_level, ", ", byte_level))),
      HasSubstr("pre_tokenizer.pretokenizers[2]" + after_byte_level));
  EXPECT_THAT(
      HfError("nested_sequence", sequence(absl::StrCat(R"({"type": "Sequence", "pretokenizers": [)",
                                                       split, "]}, ", byte_level))),
      HasSubstr("pre_tokenizer.pretokenizers[0].type: a Sequence inside a Sequence is not "
                "supported"));
  EXPECT_THAT(HfError("whitespace_in_sequence",
                      sequence(absl::StrCat(R"({"type": "Whitespace"}, )", byte_level))),
              HasSubstr("pre_tokenizer.pretokenizers[0].type: unsupported pre-tokenizer "
                        "\"Whitespace\" (supported: ByteLevel, Split)"));
  const std::string dir = MakeDir("two_splits");
  Write(dir + "/tokenizer.json", sequence(absl::StrCat(split, ", ", split, ", ", byte_level)));
  EXPECT_NE(LoadOrDie(dir), nullptr);
}

TEST(TokenizerLoaderTest, SplitRegexErrorsQuoteAHugeRegexCutShort) {
  // A regex is user data: its error names it by its ends and size, not its megabytes.
  const std::string long_alternation = absl::StrJoin(std::vector<std::string>(200'000, "a"), "|");
  for (const auto& [regex, error] : std::vector<std::pair<std::string, std::string>>{
           {long_alternation + R"(|\X)", R"(\X is not supported)"},
           {std::string(100'000, '(') + "a" + std::string(100'000, ')'),
            "parentheses are too deeply nested"}}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = DefaultWithSplitRegex("huge", regex);
    ASSERT_FALSE(tokenizer.ok());
    EXPECT_THAT(tokenizer.status().message(), HasSubstr(error));
    EXPECT_THAT(tokenizer.status().message(), HasSubstr("bytes)"));
    EXPECT_LT(tokenizer.status().message().size(), 1000);
  }
}

// PCRE2's error in a long regex is quoted where it is, in the regex as written and in its
// translation (where that differs), not by the regex's ends alone.
TEST(TokenizerLoaderTest, SplitRegexPcre2ErrorsQuoteTheTextAroundTheError) {
  const std::string alternatives = absl::StrJoin(std::vector<std::string>(500, "ab"), "|");
  for (const std::string start : {"", "\\w|"}) {
    const std::string regex = start + alternatives + "|x(?<=y+)|" + alternatives;
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        DefaultWithSplitRegex("error_around", regex);
    ASSERT_FALSE(tokenizer.ok()) << start;
    const absl::string_view message = tokenizer.status().message();
    const size_t written_end = message.find("/: PCRE2 refuses it: lookbehind assertion");
    ASSERT_NE(written_end, absl::string_view::npos) << message;
    EXPECT_LT(message.find("ab|x(?<=y+)|ab"), written_end) << message;
    EXPECT_THAT(message.substr(0, written_end), HasSubstr("..."));
    if (!start.empty()) {
      const size_t translation = message.find("of its translation /...");
      ASSERT_NE(translation, absl::string_view::npos) << message;
      EXPECT_THAT(message.substr(translation), HasSubstr("ab|x(?<=y+)|ab")) << message;
    }
    EXPECT_LT(message.size(), 1000);
  }
}

TEST(TokenizerLoaderTest, MalformedRankFileErrorsNameTheLine) {
  const std::string dir = MakeDir("bad_ranks");
  const std::string path = dir + "/tokenizer.model";
  Write(path, RankFile({}) + "aGVsbG8= 256\n!!notbase64 257\n");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr(path + ": line 258: bad base64"));

  Write(path, RankFile({}) + "aGVsbG8=\n");
  tokenizer = LoadTokenizer(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("line 257: not two fields"));

  Write(path, "aGVsbG8= 0\n");
  tokenizer = LoadTokenizer(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("no rank for the single byte 0x00"));
}

}  // namespace
}  // namespace titan
