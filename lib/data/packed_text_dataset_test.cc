#include "lib/data/packed_text_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/data/test_util.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t B = ByteTokenizer::kBos;
constexpr int32_t E = ByteTokenizer::kEos;

// Documents of uneven lengths (empty ones included) so windows cut documents at varied places.
std::vector<std::string> MakeTexts(int count, int first = 0) {
  std::vector<std::string> texts;
  for (int i = first; i < first + count; ++i) {
    texts.push_back(std::string((i * 7) % 23, static_cast<char>('a' + i % 26)));
  }
  return texts;
}

TextDatasetOptions Options(const std::string& path, int64_t seq_len, bool infinite = true,
                           int dp_rank = 0, int dp_world_size = 1) {
  TextDatasetOptions options;
  options.path = path;
  options.seq_len = seq_len;
  options.infinite = infinite;
  options.dp_rank = dp_rank;
  options.dp_world_size = dp_world_size;
  return options;
}

std::unique_ptr<PackedTextDataset> OpenOrDie(const TextDatasetOptions& options,
                                             const Tokenizer* tokenizer) {
  absl::StatusOr<std::unique_ptr<PackedTextDataset>> dataset =
      PackedTextDataset::Open(options, tokenizer);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? std::move(*dataset) : nullptr;
}

// Every window until the end of a finite dataset.
std::vector<std::vector<int32_t>> ReadToEnd(PackedTextDataset& dataset) {
  std::vector<std::vector<int32_t>> windows;
  while (true) {
    absl::StatusOr<std::vector<int32_t>> window = dataset.NextWindow();
    if (!window.ok()) {
      EXPECT_EQ(window.status().code(), absl::StatusCode::kOutOfRange) << window.status();
      return windows;
    }
    windows.push_back(*window);
  }
}

std::vector<std::vector<int32_t>> ReadWindows(PackedTextDataset& dataset, int count) {
  std::vector<std::vector<int32_t>> windows;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::vector<int32_t>> window = dataset.NextWindow();
    EXPECT_TRUE(window.ok()) << window.status();
    if (!window.ok()) break;
    windows.push_back(*window);
  }
  return windows;
}

// `first`, `second` and `third` as a.jsonl, b.jsonl.gz and c.json (an array) in `dir`; the texts
// in reading order.
std::vector<std::string> WriteThreeKinds(const std::string& dir,
                                         const std::vector<std::string>& first,
                                         const std::vector<std::string>& second,
                                         const std::vector<std::string>& third) {
  WriteTestFile(dir + "/a.jsonl", JsonLines(first));
  WriteTestFile(dir + "/b.jsonl.gz", JsonLines(second), /*gzip=*/true);
  std::string array = "[";
  for (const std::string& text : third) {
    array += absl::StrCat(array.size() > 1 ? ",\n" : "", nlohmann::json{{"text", text}}.dump());
  }
  WriteTestFile(dir + "/c.json", array + "]");
  std::vector<std::string> all = first;
  all.insert(all.end(), second.begin(), second.end());
  all.insert(all.end(), third.begin(), third.end());
  return all;
}

// Three files of different kinds in a folder; the texts in reading order.
std::vector<std::string> WriteMixedFolder(const std::string& dir) {
  return WriteThreeKinds(dir, MakeTexts(9, 0), MakeTexts(7, 9), MakeTexts(8, 16));
}

TEST(PackedTextDatasetTest, PacksDocumentsIntoWindowsWithBosAndEos) {
  const std::string path = FreshTestDir("pack") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"ab", "cde", "f", "gh"}));
  ByteTokenizer tokenizer;
  const TextDatasetOptions options = Options(path, 3, /*infinite=*/false);
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  // Stream: B a b E B c d e E B f E B g h E, cut every 4 tokens.
  const std::vector<std::vector<int32_t>> expected = {
      {B, 'a', 'b', E}, {B, 'c', 'd', 'e'}, {E, B, 'f', E}, {B, 'g', 'h', E}};
  EXPECT_EQ(ReadToEnd(*dataset), expected);
  EXPECT_EQ(ReferenceWindows({"ab", "cde", "f", "gh"}, 3), expected);
}

TEST(PackedTextDatasetTest, DropsThePartialLastWindowAndStaysAtTheEnd) {
  const std::string path = FreshTestDir("end") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"hello", "x"}));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(path, 6, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(ReadToEnd(*dataset),
              ElementsAre(std::vector<int32_t>{B, 'h', 'e', 'l', 'l', 'o', E}));
  const absl::StatusOr<std::vector<int32_t>> again = dataset->NextWindow();
  EXPECT_EQ(again.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(again.status().message(), HasSubstr(path));
  // The end is a position too.
  std::unique_ptr<PackedTextDataset> restored =
      OpenOrDie(Options(path, 6, /*infinite=*/false), &tokenizer);
  ASSERT_TRUE(restored->LoadStateDict(dataset->StateDict()).ok());
  EXPECT_EQ(restored->NextWindow().status().code(), absl::StatusCode::kOutOfRange);
}

TEST(PackedTextDatasetTest, ReadsAFolderOfEveryFormatInPathOrder) {
  const std::string dir = FreshTestDir("folder");
  std::vector<std::string> texts = WriteMixedFolder(dir + "/x");
  const std::vector<std::string> nested = MakeTexts(5, 30);
  WriteTestFile(dir + "/y/deeper/d.json.gz", JsonLines(nested), /*gzip=*/true);
  WriteTestFile(dir + "/y/README.md", "not data");
  texts.insert(texts.end(), nested.begin(), nested.end());
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(dir, 5, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->files(), ElementsAre(dir + "/x/a.jsonl", dir + "/x/b.jsonl.gz",
                                            dir + "/x/c.json", dir + "/y/deeper/d.json.gz"));
  const std::vector<std::vector<int32_t>> expected = ReferenceWindows(texts, 5);
  EXPECT_GT(expected.size(), 20u);
  EXPECT_EQ(ReadToEnd(*dataset), expected);
}

TEST(PackedTextDatasetTest, AFolderIsReadInTheByteOrderOfItsRelativePaths) {
  // As Python's sorted() orders them and Hugging Face datasets reads them: "b.jsonl" < "b/c.jsonl"
  // since '.' < '/', where comparing folder by folder put b/ first.
  const std::string dir = FreshTestDir("order");
  WriteTestFile(dir + "/b.jsonl", JsonLines({"b"}));
  WriteTestFile(dir + "/b/c.jsonl", JsonLines({"c"}));
  WriteTestFile(dir + "/b-2.jsonl", JsonLines({"b-2"}));
  WriteTestFile(dir + "/a/z.jsonl", JsonLines({"z"}));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(dir, 2, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->files(), ElementsAre(dir + "/a/z.jsonl", dir + "/b-2.jsonl",
                                            dir + "/b.jsonl", dir + "/b/c.jsonl"));
  // A state saved when b/c.jsonl came before b.jsonl names another file at its index: refused.
  nlohmann::json state = dataset->StateDict();
  state["file_index"] = 2;
  state["file"] = "b/c.jsonl";
  const absl::Status status = dataset->LoadStateDict(state);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the checkpoint stopped in \"b/c.jsonl\" (file #2 of " +
                                          dir + "), which is file #3 now"));
}

TEST(PackedTextDatasetTest, RejectsAStateWhoseEarlierFilesChangedButAcceptsFilesAddedLater) {
  // The current file keeps its name and index while a file before it is another: its name alone
  // would pass, and resuming would skip a-b.jsonl's data and never have read a-a.jsonl's.
  const std::string dir = FreshTestDir("files_before");
  WriteTestFile(dir + "/a-b.jsonl", JsonLines(MakeTexts(6, 0)));
  WriteTestFile(dir + "/a-b/x.jsonl", JsonLines(MakeTexts(12, 6)));
  WriteTestFile(dir + "/a/z.jsonl", JsonLines(MakeTexts(6, 18)));
  ByteTokenizer tokenizer;
  const TextDatasetOptions options = Options(dir, 5, /*infinite=*/false);
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  ReadWindows(*dataset, 16);
  const nlohmann::json state = dataset->StateDict();
  ASSERT_EQ(state["file"], "a-b/x.jsonl");

  // Appended data after the current file is read on from the saved position.
  WriteTestFile(dir + "/a-b/y.jsonl", JsonLines(MakeTexts(5, 24)));
  WriteTestFile(dir + "/b.jsonl", JsonLines(MakeTexts(5, 29)));
  std::unique_ptr<PackedTextDataset> reference = OpenOrDie(options, &tokenizer);
  ASSERT_NE(reference, nullptr);
  ReadWindows(*reference, 16);
  std::unique_ptr<PackedTextDataset> appended = OpenOrDie(options, &tokenizer);
  ASSERT_NE(appended, nullptr);
  ASSERT_TRUE(appended->LoadStateDict(state).ok());
  EXPECT_EQ(ReadToEnd(*appended), ReadToEnd(*reference));

  ASSERT_EQ(std::rename((dir + "/a-b.jsonl").c_str(), (dir + "/a-a.jsonl").c_str()), 0);
  std::unique_ptr<PackedTextDataset> changed = OpenOrDie(options, &tokenizer);
  ASSERT_NE(changed, nullptr);
  ASSERT_EQ(changed->files()[1], dir + "/a-b/x.jsonl");
  const absl::Status status = changed->LoadStateDict(state);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("the 1 data files before \"a-b/x.jsonl\" in ", dir,
                                     " are not those the checkpoint read")));
  EXPECT_THAT(status.message(), HasSubstr("resuming would skip or repeat data"));
  // A state of an older titan, without the record, is checked by the current file's name only.
  nlohmann::json older = state;
  older.erase("files_before_sha256");
  EXPECT_TRUE(changed->LoadStateDict(older).ok());
}

TEST(PackedTextDatasetTest, AFolderSkipsHiddenFilesAndFolders) {
  const std::string dir = FreshTestDir("hidden");
  const std::vector<std::string> texts = WriteMixedFolder(dir + "/x");
  WriteTestFile(dir + "/.git/objects/x.jsonl", "garbage, not JSON\n");
  WriteTestFile(dir + "/x/.ipynb_checkpoints/a-checkpoint.jsonl", JsonLines(MakeTexts(9, 0)));
  WriteTestFile(dir + "/x/._a.jsonl", std::string("\0\5\26\7\0\2\0\0Mac OS X", 16));
  WriteTestFile(dir + "/.d.jsonl.gz", JsonLines({"hidden"}), /*gzip=*/true);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(dir, 5, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->files(),
              ElementsAre(dir + "/x/a.jsonl", dir + "/x/b.jsonl.gz", dir + "/x/c.json"));
  EXPECT_EQ(ReadToEnd(*dataset), ReferenceWindows(texts, 5));

  // Only the names below the folder count: a hidden folder named as the path is read.
  std::unique_ptr<PackedTextDataset> named =
      OpenOrDie(Options(dir + "/.git", 5, /*infinite=*/false), &tokenizer);
  ASSERT_NE(named, nullptr);
  EXPECT_THAT(named->files(), ElementsAre(dir + "/.git/objects/x.jsonl"));

  const std::string only_hidden = FreshTestDir("only_hidden");
  WriteTestFile(only_hidden + "/.a.jsonl", JsonLines({"x"}));
  const absl::Status status = PackedTextDataset::Open(Options(only_hidden, 4), &tokenizer).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("names starting with \".\" are skipped"));
}

TextDatasetOptions SplitOptions(const std::string& path, const std::string& split) {
  TextDatasetOptions options = Options(path, 5, /*infinite=*/false);
  options.split = split;
  return options;
}

TEST(PackedTextDatasetTest, AFolderIsReadByHuggingFaceSplits) {
  // The hunter's copy of c4: torchtitan loads split="train" to train, "validation" to validate.
  const std::string dir = FreshTestDir("c4_en");
  WriteTestFile(dir + "/c4-train.00000-of-00002.json.gz", JsonLines(MakeTexts(6, 0)), true);
  WriteTestFile(dir + "/c4-train.00001-of-00002.json.gz", JsonLines(MakeTexts(6, 6)), true);
  WriteTestFile(dir + "/c4-validation.00000-of-00001.json.gz", JsonLines(MakeTexts(5, 12)), true);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> train = OpenOrDie(SplitOptions(dir, "train"), &tokenizer);
  ASSERT_NE(train, nullptr);
  EXPECT_THAT(train->files(), ElementsAre(dir + "/c4-train.00000-of-00002.json.gz",
                                          dir + "/c4-train.00001-of-00002.json.gz"));
  EXPECT_EQ(ReadToEnd(*train), ReferenceWindows(MakeTexts(12, 0), 5));
  std::unique_ptr<PackedTextDataset> validation =
      OpenOrDie(SplitOptions(dir, "validation"), &tokenizer);
  ASSERT_NE(validation, nullptr);
  EXPECT_THAT(validation->files(), ElementsAre(dir + "/c4-validation.00000-of-00001.json.gz"));
  EXPECT_EQ(ReadToEnd(*validation), ReferenceWindows(MakeTexts(5, 12), 5));

  // A file is read whatever its name.
  std::unique_ptr<PackedTextDataset> file =
      OpenOrDie(SplitOptions(dir + "/c4-validation.00000-of-00001.json.gz", "train"), &tokenizer);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->files().size(), 1);
}

TEST(PackedTextDatasetTest, AFolderWithoutTheSplitIsRefused) {
  const std::string dir = FreshTestDir("hub_style");
  WriteTestFile(dir + "/train-00000-of-00002.jsonl", JsonLines(MakeTexts(3, 0)));
  WriteTestFile(dir + "/train-00001-of-00002.jsonl", JsonLines(MakeTexts(3, 3)));
  WriteTestFile(dir + "/test-00000-of-00001.jsonl", JsonLines(MakeTexts(3, 6)));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> train = OpenOrDie(SplitOptions(dir, "train"), &tokenizer);
  ASSERT_NE(train, nullptr);
  EXPECT_THAT(train->files(), ElementsAre(dir + "/train-00000-of-00002.jsonl",
                                          dir + "/train-00001-of-00002.jsonl"));
  const absl::Status status =
      PackedTextDataset::Open(SplitOptions(dir, "validation"), &tokenizer).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(dir + ": its file and folder names make the splits train (2 files), "
                              "test (1 file) (Hugging Face datasets' naming) but no "
                              "\"validation\" split"));
}

TEST(PackedTextDatasetTest, AFolderWithoutSplitNamesIsReadWholeForEither) {
  // As Hugging Face datasets, which skips "__" folders (__pycache__) but not "_" ones.
  const std::string dir = FreshTestDir("unsplit");
  WriteTestFile(dir + "/a.jsonl", JsonLines(MakeTexts(4, 0)));
  WriteTestFile(dir + "/_keep/z.jsonl", JsonLines(MakeTexts(4, 4)));
  WriteTestFile(dir + "/__pycache__/z.jsonl", "garbage, not JSON\n");
  ByteTokenizer tokenizer;
  for (const std::string split : {"train", "validation"}) {
    std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(SplitOptions(dir, split), &tokenizer);
    ASSERT_NE(dataset, nullptr);
    EXPECT_THAT(dataset->files(), ElementsAre(dir + "/_keep/z.jsonl", dir + "/a.jsonl")) << split;
  }
}

TEST(PackedTextDatasetTest, AStateOfAWholeFolderReadInItsValidationSplitIsRefused) {
  // Older titans read validation.jsonl after train.jsonl: a checkpoint stopped in it cannot resume.
  const std::string dir = FreshTestDir("corpus");
  WriteTestFile(dir + "/train.jsonl", JsonLines(MakeTexts(6, 0)));
  WriteTestFile(dir + "/validation.jsonl", JsonLines(MakeTexts(6, 6)));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(SplitOptions(dir, "train"), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->files(), ElementsAre(dir + "/train.jsonl"));
  nlohmann::json state = dataset->StateDict();
  state["file_index"] = 1;
  state["file"] = "validation.jsonl";
  const absl::Status status = dataset->LoadStateDict(state);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              HasSubstr("the checkpoint stopped in \"validation.jsonl\" (file #1 of " + dir +
                        " (its \"train\" split by Hugging Face datasets' file naming, which "
                        "titan reads since)), which is not among its data files now"));
}

TEST(PackedTextDatasetTest, AFolderRefusesDataItCannotRead) {
  // Skipped, they would leave the run training on the rest alone.
  ByteTokenizer tokenizer;
  for (const std::string name :
       {"shard.JSONL", "shard.jsonl.zst", "part-0.parquet", "d.json.bz2", "t.arrow"}) {
    const std::string dir = FreshTestDir("unreadable");
    WriteMixedFolder(dir);
    WriteTestFile(dir + "/sub/" + name, "data");
    const absl::Status status = PackedTextDataset::Open(Options(dir, 4), &tokenizer).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), HasSubstr(dir + "/sub/" + name + ": titan reads only .jsonl"));
  }
  const std::string dir = FreshTestDir("fifo");
  WriteMixedFolder(dir);
  ASSERT_EQ(::mkfifo((dir + "/pipe.jsonl").c_str(), 0600), 0);
  const absl::Status status = PackedTextDataset::Open(Options(dir, 4), &tokenizer).status();
  EXPECT_THAT(status.message(), HasSubstr(dir + "/pipe.jsonl: not a regular file"));
  // A link to nothing: its target is what is missing, nothing to convert.
  const std::string dangling = FreshTestDir("dangling");
  WriteMixedFolder(dangling);
  ASSERT_EQ(::symlink((dangling + "/gone.jsonl").c_str(), (dangling + "/b.jsonl").c_str()), 0);
  EXPECT_THAT(PackedTextDataset::Open(Options(dangling, 4), &tokenizer).status().message(),
              HasSubstr(absl::StrCat(dangling, "/b.jsonl (a link to ", dangling,
                                     "/gone.jsonl): no such file or directory; fix it, or move it "
                                     "out of the dataset folder ",
                                     dangling)));
}

TEST(PackedTextDatasetTest, AFolderRefusesALinkBackToAFolderItIsIn) {
  // Followed, each link would list the folder again at every depth until the OS stops it.
  ByteTokenizer tokenizer;
  for (const std::string link : {"self", "sub/up"}) {
    const std::string dir = FreshTestDir("loop");
    WriteMixedFolder(dir);
    WriteTestFile(dir + "/sub/d.jsonl", JsonLines({"d"}));
    ASSERT_EQ(::symlink(link == "self" ? "." : "..", (dir + "/" + link).c_str()), 0);
    const absl::Status status = PackedTextDataset::Open(Options(dir, 4), &tokenizer).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << link;
    EXPECT_THAT(status.message(),
                HasSubstr(dir + "/" + link + " is " + dir +
                          " again, a folder it is in, reached through a link on that path"));
  }
}

TEST(PackedTextDatasetTest, AFolderFollowsLinksToFilesAndFoldersElsewhere) {
  // As Hugging Face datasets does: shards are often links into a cache.
  const std::string elsewhere = FreshTestDir("elsewhere");
  WriteTestFile(elsewhere + "/shards/s.jsonl", JsonLines({"s"}));
  WriteTestFile(elsewhere + "/f.jsonl", JsonLines({"f"}));
  const std::string dir = FreshTestDir("links");
  WriteTestFile(dir + "/a.jsonl", JsonLines({"a"}));
  ASSERT_EQ(::symlink((elsewhere + "/shards").c_str(), (dir + "/b").c_str()), 0);
  ASSERT_EQ(::symlink((elsewhere + "/f.jsonl").c_str(), (dir + "/c.jsonl").c_str()), 0);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(dir, 2, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_THAT(dataset->files(),
              ElementsAre(dir + "/a.jsonl", dir + "/b/s.jsonl", dir + "/c.jsonl"));
}

// Documents that quote special tokens, as a web page about Llama 3 would.
const std::vector<std::string>& TextsQuotingSpecialTokens() {
  static const auto* const texts = new std::vector<std::string>{
      "The prompt starts with <|begin_of_text|> and ends with <|end_of_text|>.",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>hi<|eot_id|>",
      "plain",
  };
  return *texts;
}

TEST(PackedTextDatasetTest, SpecialTokenTextInDocumentsIsPlainTextWithTiktoken) {
  // Llama 3's layout with a rank per byte (rank = byte): ids spell the bytes, and BOS and EOS take
  // 256 and 257 as in ByteTokenizer, so the reference packing is ReferenceWindows.
  const std::string dir = FreshTestDir("tiktoken_specials");
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&ranks, absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", b, "\n");
  }
  WriteTestFile(dir + "/tokenizer/tokenizer.model", ranks);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir + "/tokenizer");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_EQ((*tokenizer)->bos_id(), B);
  WriteTestFile(dir + "/data/a.jsonl", JsonLines(TextsQuotingSpecialTokens()));
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(dir + "/data", 8, /*infinite=*/false), tokenizer->get());
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(ReadToEnd(*dataset), ReferenceWindows(TextsQuotingSpecialTokens(), 8));
}

TEST(PackedTextDatasetTest, SpecialTokenTextInDocumentsIsPlainTextWithTokenizerJson) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer("assets/default_tokenizer");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string path = FreshTestDir("hf_specials") + "/a.jsonl";
  WriteTestFile(path, JsonLines(TextsQuotingSpecialTokens()));
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(path, 4, /*infinite=*/false), tokenizer->get());
  ASSERT_NE(dataset, nullptr);
  std::vector<int32_t> stream;
  for (const std::vector<int32_t>& window : ReadToEnd(*dataset)) {
    stream.insert(stream.end(), window.begin(), window.end());
  }
  // One BOS and one EOS a document, the ones packing adds; the quoted ones are text.
  const int32_t bos = *(*tokenizer)->bos_id();
  const int32_t eos = (*tokenizer)->eos_id();
  EXPECT_EQ(std::count(stream.begin(), stream.end(), bos), 3);
  EXPECT_EQ(std::count(stream.begin(), stream.end(), eos), 3);
  EXPECT_EQ(stream.front(), bos);
  const std::vector<int32_t> second =
      (*tokenizer)->Encode(TextsQuotingSpecialTokens()[1], true, true, SpecialTokenText::kPlain);
  EXPECT_NE(std::search(stream.begin(), stream.end(), second.begin(), second.end()), stream.end());
}

TEST(PackedTextDatasetTest, TextFieldOption) {
  const std::string path = FreshTestDir("field") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"abc", "de"}, "content"));
  ByteTokenizer tokenizer;
  TextDatasetOptions options = Options(path, 2, /*infinite=*/false);
  options.text_field = "content";
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(ReadToEnd(*dataset), ReferenceWindows({"abc", "de"}, 2));
}

TEST(PackedTextDatasetTest, InfiniteLoopsOverTheDataKeepingThePartialWindow) {
  const std::string dir = FreshTestDir("loop");
  const std::vector<std::string> texts = WriteMixedFolder(dir);
  std::vector<std::string> three_epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    three_epochs.insert(three_epochs.end(), texts.begin(), texts.end());
  }
  const std::vector<std::vector<int32_t>> expected = ReferenceWindows(three_epochs, 9);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(Options(dir, 9), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(ReadWindows(*dataset, expected.size()), expected);
  EXPECT_EQ(dataset->StateDict()["epoch"], 2);
}

// Rank r of W reads global windows r, r + W, ...: a step's windows over all ranks are the ones a
// single process reads for the same global batch.
TEST(PackedTextDatasetTest, DataParallelRanksSplitTheSingleProcessStream) {
  const std::string dir = FreshTestDir("dp");
  WriteMixedFolder(dir);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> single =
      OpenOrDie(Options(dir, 4, /*infinite=*/false), &tokenizer);
  ASSERT_NE(single, nullptr);
  const std::vector<std::vector<int32_t>> all = ReadToEnd(*single);
  ASSERT_GT(all.size(), 30u);
  for (int world_size : {2, 4}) {
    std::vector<std::vector<int32_t>> gathered(all.size());
    size_t total = 0;
    for (int rank = 0; rank < world_size; ++rank) {
      std::unique_ptr<PackedTextDataset> dataset =
          OpenOrDie(Options(dir, 4, /*infinite=*/false, rank, world_size), &tokenizer);
      ASSERT_NE(dataset, nullptr);
      const std::vector<std::vector<int32_t>> mine = ReadToEnd(*dataset);
      for (size_t step = 0; step < mine.size(); ++step) {
        ASSERT_LT(step * world_size + rank, all.size());
        gathered[step * world_size + rank] = mine[step];
      }
      total += mine.size();
    }
    EXPECT_EQ(total, all.size()) << world_size;
    EXPECT_EQ(gathered, all) << world_size;
  }
}

// Saving after every window and restoring into a fresh dataset continues exactly: positions fall
// mid-document, on file boundaries and in later epochs.
TEST(PackedTextDatasetTest, StateRestoresTheExactPosition) {
  const std::string dir = FreshTestDir("state");
  WriteMixedFolder(dir);
  ByteTokenizer tokenizer;
  const TextDatasetOptions options = Options(dir, 6);
  std::unique_ptr<PackedTextDataset> reference = OpenOrDie(options, &tokenizer);
  ASSERT_NE(reference, nullptr);
  const std::vector<std::vector<int32_t>> windows = ReadWindows(*reference, 120);
  ASSERT_EQ(reference->StateDict()["epoch"], 2);

  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  std::set<int64_t> files_seen;
  for (size_t saved = 0; saved + 5 <= windows.size(); ++saved) {
    // Through text, as a checkpoint would store it.
    const nlohmann::json state = nlohmann::json::parse(dataset->StateDict().dump());
    files_seen.insert(state["file_index"].get<int64_t>());
    std::unique_ptr<PackedTextDataset> restored = OpenOrDie(options, &tokenizer);
    ASSERT_NE(restored, nullptr);
    ASSERT_TRUE(restored->LoadStateDict(state).ok());
    EXPECT_EQ(ReadWindows(*restored, 5), std::vector<std::vector<int32_t>>(
                                             windows.begin() + saved, windows.begin() + saved + 5))
        << "restored after " << saved << " windows from " << state.dump();
    ASSERT_EQ(ReadWindows(*dataset, 1)[0], windows[saved]);
  }
  EXPECT_EQ(files_seen.size(), 3u);
}

// After the same number of calls every rank holds the same state, which a different data-parallel
// layout can load: the next step's windows are the next global windows.
TEST(PackedTextDatasetTest, StateIsRankIndependentAndReshardable) {
  const std::string dir = FreshTestDir("reshard");
  WriteMixedFolder(dir);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> single = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(single, nullptr);
  const std::vector<std::vector<int32_t>> all = ReadWindows(*single, 40);

  nlohmann::json state;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<PackedTextDataset> dataset =
        OpenOrDie(Options(dir, 5, /*infinite=*/true, rank, 2), &tokenizer);
    ASSERT_NE(dataset, nullptr);
    ReadWindows(*dataset, 7);
    if (rank == 0) state = dataset->StateDict();
    EXPECT_EQ(dataset->StateDict(), state);
  }
  for (int rank = 0; rank < 4; ++rank) {
    std::unique_ptr<PackedTextDataset> dataset =
        OpenOrDie(Options(dir, 5, /*infinite=*/true, rank, 4), &tokenizer);
    ASSERT_NE(dataset, nullptr);
    ASSERT_TRUE(dataset->LoadStateDict(state).ok());
    const std::vector<std::vector<int32_t>> mine = ReadWindows(*dataset, 3);
    for (int step = 0; step < 3; ++step) EXPECT_EQ(mine[step], all[14 + step * 4 + rank]);
  }
}

// A document far longer than a window: `length` letters.
std::string LongText(size_t length, int seed) {
  std::string text(length, ' ');
  for (size_t i = 0; i < length; ++i) text[i] = static_cast<char>('a' + (i * 7 + seed) % 26);
  return text;
}

// Long documents between short ones in every file kind, one of them last in its file; the texts
// in reading order.
std::vector<std::string> WriteLongDocumentFolder(const std::string& dir, size_t length) {
  return WriteThreeKinds(dir, {"ab", LongText(length, 1), "cde", "", LongText(length, 2)},
                         {LongText(length, 3), "fg", "hij"}, {"k", LongText(length, 4), "lm"});
}

// Bytes of a state as a checkpoint's manifest.json holds it (pretty-printed).
size_t StateBytes(const nlohmann::json& state) { return state.dump(2).size(); }

// A loader saved anywhere in a document of 20000 tokens has a state of a few hundred bytes (the
// tokens it has yet to window are not listed), and a fresh loader restored from it reads the
// same windows: inside long documents, across document and file boundaries (gzip included) and
// into the next epoch.
TEST(PackedTextDatasetTest, StateInALongDocumentIsSmallAndRestoresExactly) {
  const std::string dir = FreshTestDir("long_state");
  const std::vector<std::string> texts = WriteLongDocumentFolder(dir, 20000);
  ByteTokenizer tokenizer;
  const TextDatasetOptions options = Options(dir, 31);
  std::unique_ptr<PackedTextDataset> reference = OpenOrDie(options, &tokenizer);
  ASSERT_NE(reference, nullptr);
  const std::vector<std::vector<int32_t>> windows = ReadWindows(*reference, 3300);
  ASSERT_EQ(reference->StateDict()["epoch"], 1);
  const std::vector<std::vector<int32_t>> epoch = ReferenceWindows(texts, 31);
  ASSERT_EQ(std::vector<std::vector<int32_t>>(windows.begin(), windows.begin() + epoch.size()),
            epoch);

  constexpr int kCompared = 40;  // 1280 tokens: restores within that of a boundary cross it
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  std::set<std::string> files_seen;
  int documents_named = 0;
  for (size_t saved = 0; saved + kCompared <= windows.size(); ++saved) {
    const nlohmann::json state = nlohmann::json::parse(dataset->StateDict().dump());
    ASSERT_LT(StateBytes(state), 512u) << "after " << saved << " windows";
    files_seen.insert(state["file"].get<std::string>());
    documents_named += state.contains("document");
    std::unique_ptr<PackedTextDataset> restored = OpenOrDie(options, &tokenizer);
    ASSERT_NE(restored, nullptr);
    ASSERT_TRUE(restored->LoadStateDict(state).ok()) << state.dump();
    // Before reading, the state is the loaded one.
    ASSERT_EQ(restored->StateDict(), state);
    ASSERT_EQ(ReadWindows(*restored, kCompared),
              std::vector<std::vector<int32_t>>(windows.begin() + saved,
                                                windows.begin() + saved + kCompared))
        << "restored after " << saved << " windows from " << state.dump();
    ASSERT_EQ(ReadWindows(*dataset, 1)[0], windows[saved]);
  }
  EXPECT_EQ(files_seen, (std::set<std::string>{"a.jsonl", "b.jsonl.gz", "c.json"}));
  EXPECT_GT(documents_named, 3000);
}

// Each rank's state is the same small one, and restores exactly under the same or another
// data-parallel degree, with long documents.
TEST(PackedTextDatasetTest, LongDocumentStateIsRankIndependentAndReshardable) {
  const std::string dir = FreshTestDir("long_reshard");
  WriteLongDocumentFolder(dir, 5000);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> single = OpenOrDie(Options(dir, 15), &tokenizer);
  ASSERT_NE(single, nullptr);
  const std::vector<std::vector<int32_t>> all = ReadWindows(*single, 3000);

  for (int calls : {1, 100, 333, 420, 555}) {
    nlohmann::json state;
    for (int rank = 0; rank < 3; ++rank) {
      std::unique_ptr<PackedTextDataset> dataset =
          OpenOrDie(Options(dir, 15, /*infinite=*/true, rank, 3), &tokenizer);
      ASSERT_NE(dataset, nullptr);
      ReadWindows(*dataset, calls);
      if (rank == 0) state = dataset->StateDict();
      ASSERT_EQ(dataset->StateDict(), state) << calls;
      ASSERT_LT(StateBytes(state), 512u);
      // The same rank restored goes on as this one does.
      std::unique_ptr<PackedTextDataset> restored =
          OpenOrDie(Options(dir, 15, /*infinite=*/true, rank, 3), &tokenizer);
      ASSERT_TRUE(restored->LoadStateDict(state).ok());
      EXPECT_EQ(ReadWindows(*restored, 10), ReadWindows(*dataset, 10)) << calls << " " << rank;
    }
    for (int rank = 0; rank < 2; ++rank) {
      std::unique_ptr<PackedTextDataset> dataset =
          OpenOrDie(Options(dir, 15, /*infinite=*/true, rank, 2), &tokenizer);
      ASSERT_TRUE(dataset->LoadStateDict(state).ok());
      const std::vector<std::vector<int32_t>> mine = ReadWindows(*dataset, 10);
      for (int step = 0; step < 10; ++step) {
        EXPECT_EQ(mine[step], all[3 * calls + step * 2 + rank]) << calls << " " << rank;
      }
    }
  }
}

// The manifest of a titan that listed the unwindowed tokens under "tokens" (saved here after two
// windows of {"ab", "cde", "f", "gh"}: "E" of "cde" is left).
TEST(PackedTextDatasetTest, AStateListingTheTokensStillRestores) {
  const std::string path = FreshTestDir("old_state") + "/a.jsonl";
  WriteTestFile(path,
                "{\"text\":\"ab\"}\n{\"text\":\"cde\"}\n{\"text\":\"f\"}\n{\"text\":\"gh\"}\n");
  const nlohmann::json old_state = nlohmann::json::parse(R"({
    "byte_offset": 29, "documents_in_epoch": 2, "epoch": 0, "file": "a.jsonl", "file_index": 0,
    "line": 2, "seq_len": 3, "tokens": [257], "windows_consumed": 2})");
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset =
      OpenOrDie(Options(path, 3, /*infinite=*/false), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  ReadWindows(*dataset, 2);
  nlohmann::json saved = dataset->StateDict();
  EXPECT_EQ(saved["document"],
            nlohmann::json::parse(
                R"({"byte_offset": 14, "line": 1, "num_tokens": 5, "consumed_tokens": 4})"));
  saved.erase("document");
  saved.erase("files_before_sha256");
  saved["tokens"] = {E};
  EXPECT_EQ(saved, old_state);

  std::unique_ptr<PackedTextDataset> restored =
      OpenOrDie(Options(path, 3, /*infinite=*/false), &tokenizer);
  ASSERT_TRUE(restored->LoadStateDict(old_state).ok());
  // Until the next document the tokens stay listed: where theirs started is not known.
  nlohmann::json restored_state = restored->StateDict();
  restored_state.erase("files_before_sha256");
  EXPECT_EQ(restored_state, old_state);
  EXPECT_THAT(ReadToEnd(*restored), ElementsAre(std::vector<int32_t>{E, B, 'f', E},
                                                std::vector<int32_t>{B, 'g', 'h', E}));
}

// An older state in the middle of a long document: the tokens it lists are the rest of that
// document, and a loader restored from it reads on exactly, its next states small again.
TEST(PackedTextDatasetTest, AStateListingTheTokensOfALongDocumentRestoresExactly) {
  const std::string path = FreshTestDir("old_long_state") + "/a.jsonl";
  const std::vector<std::string> texts = {"ab", LongText(3000, 1), "cde", LongText(2000, 2), "f"};
  WriteTestFile(path, JsonLines(texts));
  std::vector<int32_t> stream;
  std::vector<size_t> document_ends;  // in stream
  ByteTokenizer tokenizer;
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, true, true, SpecialTokenText::kPlain);
    stream.insert(stream.end(), ids.begin(), ids.end());
    document_ends.push_back(stream.size());
  }
  const TextDatasetOptions options = Options(path, 9, /*infinite=*/false);
  std::unique_ptr<PackedTextDataset> reference = OpenOrDie(options, &tokenizer);
  ASSERT_NE(reference, nullptr);
  const std::vector<std::vector<int32_t>> windows = ReadToEnd(*reference);
  ASSERT_EQ(windows, ReferenceWindows(texts, 9));

  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(options, &tokenizer);
  ASSERT_NE(dataset, nullptr);
  for (size_t saved = 0; saved + 7 <= windows.size(); saved += 7) {
    // What an older titan saved here: the new state with the tokens up to the document's end.
    nlohmann::json state = dataset->StateDict();
    const int64_t documents = state["documents_in_epoch"].get<int64_t>();
    const size_t end = documents == 0 ? 0 : document_ends[documents - 1];
    const std::vector<int32_t> pending(stream.begin() + saved * 10, stream.begin() + end);
    if (state.contains("tokens")) {
      EXPECT_EQ(state["tokens"], nlohmann::json(pending));
    }
    state.erase("document");
    state["tokens"] = pending;
    std::unique_ptr<PackedTextDataset> restored = OpenOrDie(options, &tokenizer);
    ASSERT_TRUE(restored->LoadStateDict(state).ok());
    std::vector<std::vector<int32_t>> rest = ReadWindows(*restored, 1);
    // Reading on, it finds where that document starts: its next state names it.
    const nlohmann::json next_state = restored->StateDict();
    EXPECT_LT(StateBytes(next_state), 512u) << "restored after " << saved << " windows";
    std::unique_ptr<PackedTextDataset> again = OpenOrDie(options, &tokenizer);
    ASSERT_TRUE(again->LoadStateDict(next_state).ok());
    const std::vector<std::vector<int32_t>> more = ReadToEnd(*again);
    rest.insert(rest.end(), more.begin(), more.end());
    ASSERT_EQ(rest, std::vector<std::vector<int32_t>>(windows.begin() + saved, windows.end()))
        << "restored after " << saved << " windows";
    ReadWindows(*dataset, 7);
  }
  // A file that no longer holds the listed tokens' document: they stay listed until windowed.
  std::unique_ptr<PackedTextDataset> restored = OpenOrDie(options, &tokenizer);
  nlohmann::json state = nlohmann::json::parse(R"({"seq_len": 9, "epoch": 0, "file_index": 0,
      "file": "a.jsonl", "line": 2, "documents_in_epoch": 2, "windows_consumed": 1})");
  state["byte_offset"] = JsonLines({texts[0], texts[1]}).size();
  std::vector<int32_t> listed(stream.begin() + 10, stream.begin() + document_ends[1]);
  listed.back() = 'x';  // not the EOS the document ends with
  state["tokens"] = listed;
  ASSERT_TRUE(restored->LoadStateDict(state).ok());
  EXPECT_EQ(ReadWindows(*restored, 1)[0], windows[1]);
  EXPECT_TRUE(restored->StateDict().contains("tokens"));
  ReadWindows(*restored, 304);  // into texts[3]
  EXPECT_TRUE(restored->StateDict().contains("document"));
  EXPECT_LT(StateBytes(restored->StateDict()), 512u);
  EXPECT_EQ(ReadToEnd(*restored),
            std::vector<std::vector<int32_t>>(windows.begin() + 306, windows.end()));
}

TEST(PackedTextDatasetTest, RejectsAStateThatDoesNotMatch) {
  const std::string dir = FreshTestDir("mismatch");
  WriteMixedFolder(dir);
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  ReadWindows(*dataset, 20);
  const nlohmann::json state = dataset->StateDict();
  ASSERT_EQ(state["file"], "b.jsonl.gz");

  std::unique_ptr<PackedTextDataset> other_len = OpenOrDie(Options(dir, 6), &tokenizer);
  EXPECT_THAT(other_len->LoadStateDict(state).message(),
              HasSubstr("saved with seq_len 5, this run has 6"));
  nlohmann::json renamed = state;
  renamed["file"] = "other.jsonl";
  EXPECT_THAT(dataset->LoadStateDict(renamed).message(),
              HasSubstr(absl::StrCat("the checkpoint stopped in \"other.jsonl\" (file #1 of ", dir,
                                     "), which is not among its data files now (file #1 is now "
                                     "\"b.jsonl.gz\")")));
  renamed["file"] = 7;
  EXPECT_THAT(dataset->LoadStateDict(renamed).message(),
              HasSubstr("\"file\": expected the name of the file it stopped in, got 7"));
  ASSERT_TRUE(state.contains("document"));
  nlohmann::json bad_token = state;  // as older titans saved it
  bad_token.erase("document");
  bad_token["tokens"] = {999};
  EXPECT_THAT(dataset->LoadStateDict(bad_token).message(), HasSubstr("got 999"));
  nlohmann::json both = state;
  both["tokens"] = nlohmann::json::array();
  EXPECT_THAT(dataset->LoadStateDict(both).message(), HasSubstr("no \"tokens\" beside it"));
  nlohmann::json all_consumed = state;
  all_consumed["document"]["consumed_tokens"] = state["document"]["num_tokens"];
  EXPECT_THAT(dataset->LoadStateDict(all_consumed).message(), HasSubstr("with tokens left"));
  nlohmann::json no_count = state;
  no_count["document"].erase("num_tokens");
  EXPECT_THAT(dataset->LoadStateDict(no_count).message(), HasSubstr("\"document.num_tokens\""));
  nlohmann::json no_offset = state;
  no_offset.erase("byte_offset");
  EXPECT_THAT(dataset->LoadStateDict(no_offset).message(), HasSubstr("\"byte_offset\""));
  // A rejected state leaves the dataset where it was.
  EXPECT_EQ(dataset->StateDict(), state);
}

TEST(PackedTextDatasetTest, AStateWhoseFileIsGoneOrMovedSaysWhatTheCheckpointRecorded) {
  // The checkpoint's side is what it recorded, the folder's what it holds now (they read the
  // other way round: 'expected "" (file #1 ...), got "b.jsonl"').
  const std::string dir = FreshTestDir("gone");
  WriteTestFile(dir + "/a.jsonl", JsonLines({"short doc"}));
  WriteTestFile(dir + "/b.jsonl", JsonLines(MakeTexts(30)));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  ReadWindows(*dataset, 6);
  const nlohmann::json state = dataset->StateDict();
  ASSERT_EQ(state["file"], "b.jsonl");
  ASSERT_EQ(state["file_index"], 1);

  ASSERT_EQ(std::remove((dir + "/b.jsonl").c_str()), 0);
  std::unique_ptr<PackedTextDataset> removed = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(removed, nullptr);
  absl::Status status = removed->LoadStateDict(state);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            absl::StrCat("dataset state: the checkpoint stopped in \"b.jsonl\" (file #1 of ", dir,
                         "), which is not among its data files now (it holds 1 data file now); "
                         "restore the data files to resume where the checkpoint stopped"));

  WriteTestFile(dir + "/c.jsonl", JsonLines({"another"}));
  std::unique_ptr<PackedTextDataset> replaced = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(replaced, nullptr);
  EXPECT_THAT(replaced->LoadStateDict(state).message(),
              HasSubstr("which is not among its data files now (file #1 is now \"c.jsonl\")"));

  ASSERT_EQ(std::remove((dir + "/c.jsonl").c_str()), 0);
  ASSERT_EQ(std::rename((dir + "/a.jsonl").c_str(), (dir + "/c.jsonl").c_str()), 0);
  WriteTestFile(dir + "/b.jsonl", JsonLines(MakeTexts(30)));
  std::unique_ptr<PackedTextDataset> reordered = OpenOrDie(Options(dir, 5), &tokenizer);
  ASSERT_NE(reordered, nullptr);
  EXPECT_THAT(reordered->LoadStateDict(state).message(),
              HasSubstr("stopped in \"b.jsonl\" (file #1 of " + dir +
                        "), which is file #0 now (the files before it changed since)"));

  nlohmann::json finished = state;  // a finite dataset read to its end
  finished["file"] = "";
  EXPECT_THAT(reordered->LoadStateDict(finished).message(),
              HasSubstr("the checkpoint had read all 1 data files of " + dir +
                        ", but file #1 is now \"c.jsonl\""));
}

TEST(PackedTextDatasetTest, AFileChangedSinceTheStateIsNamedAsThePossibleCause) {
  const std::string dir = FreshTestDir("changed");
  WriteTestFile(dir + "/a.jsonl", JsonLines(MakeTexts(40)));
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(Options(dir, 8), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  ReadWindows(*dataset, 12);
  const nlohmann::json state = dataset->StateDict();
  // Reading on starts with the document the unwindowed tokens are from.
  ASSERT_TRUE(state.contains("document"));
  const int64_t resumed_at = state["document"]["byte_offset"].get<int64_t>();
  ASSERT_GT(resumed_at, 14);
  // Another document where the saved one started: it ends elsewhere, with other tokens.
  const std::string original = JsonLines(MakeTexts(40));
  WriteTestFile(dir + "/a.jsonl", original.substr(0, resumed_at) + "{\"text\": \"zz\"}\n" +
                                      original.substr(resumed_at));
  std::unique_ptr<PackedTextDataset> restored = OpenOrDie(Options(dir, 8), &tokenizer);
  ASSERT_NE(restored, nullptr);
  ASSERT_TRUE(restored->LoadStateDict(state).ok());
  absl::Status status = restored->NextWindow().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("recorded a document of ",
                                                       state["document"]["num_tokens"].dump(),
                                                       " tokens from byte ", resumed_at)));
  EXPECT_THAT(status.message(), HasSubstr("has the file or the tokenizer changed since?"));
  // Another corpus under the same name: the saved offset falls inside a line.
  WriteTestFile(dir + "/a.jsonl", "{\"text\": \"" + std::string(4000, 'x') + "\"}\n");
  restored = OpenOrDie(Options(dir, 8), &tokenizer);
  ASSERT_NE(restored, nullptr);
  ASSERT_TRUE(restored->LoadStateDict(state).ok());
  const std::string hint =
      absl::StrCat("(reading on from byte ", resumed_at,
                   " as the checkpoint recorded: has the file changed since?)");
  EXPECT_THAT(restored->NextWindow().status().message(), HasSubstr(hint));
  // A shorter file: the offset is past its end, where reading would silently end the file.
  WriteTestFile(dir + "/a.jsonl", "{\"text\": \"x\"}\n");
  restored = OpenOrDie(Options(dir, 8), &tokenizer);
  ASSERT_TRUE(restored->LoadStateDict(state).ok());
  const std::string message(restored->NextWindow().status().message());
  EXPECT_THAT(message, HasSubstr("is past the end of the file (14 bytes)"));
  EXPECT_THAT(message, HasSubstr(hint));
}

TEST(PackedTextDatasetTest, MalformedLineNamesFileAndLine) {
  const std::string dir = FreshTestDir("malformed");
  WriteTestFile(dir + "/a.jsonl", JsonLines({"fine"}));
  WriteTestFile(dir + "/b.jsonl", JsonLines({"ok", "ok"}) + "{\"text\": 3}\n");
  ByteTokenizer tokenizer;
  std::unique_ptr<PackedTextDataset> dataset = OpenOrDie(Options(dir, 50), &tokenizer);
  ASSERT_NE(dataset, nullptr);
  const absl::Status status = dataset->NextWindow().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(dir + "/b.jsonl:3: text field \"text\" is number, expected a string"));
}

TEST(PackedTextDatasetTest, ClearErrorsForMissingOrEmptyData) {
  ByteTokenizer tokenizer;
  const std::string dir = FreshTestDir("missing");
  absl::Status status = PackedTextDataset::Open(Options(dir + "/nope", 4), &tokenizer).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(dir + "/nope: no such file or directory"));

  WriteTestFile(dir + "/notes.txt", "x");
  status = PackedTextDataset::Open(Options(dir, 4), &tokenizer).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(dir + ": no .jsonl, .json, .jsonl.gz or .json.gz files"));
  status = PackedTextDataset::Open(Options(dir + "/notes.txt", 4), &tokenizer).status();
  EXPECT_THAT(status.message(), HasSubstr("notes.txt: expected a .jsonl"));

  WriteTestFile(dir + "/blank.jsonl", "\n\n");
  std::unique_ptr<PackedTextDataset> blank = OpenOrDie(Options(dir, 4), &tokenizer);
  ASSERT_NE(blank, nullptr);
  status = blank->NextWindow().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("no documents"));
}

TEST(PackedTextDatasetTest, RejectsBadOptions) {
  const std::string path = FreshTestDir("options") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"a"}));
  ByteTokenizer tokenizer;
  EXPECT_THAT(PackedTextDataset::Open(Options(path, 0), &tokenizer).status().message(),
              HasSubstr("seq_len must be at least 1, got 0"));
  EXPECT_THAT(PackedTextDataset::Open(Options(path, 4, /*infinite=*/true, /*dp_rank=*/2,
                                              /*dp_world_size=*/2),
                                      &tokenizer)
                  .status()
                  .message(),
              HasSubstr("got dp_rank 2 and dp_world_size 2"));
  EXPECT_FALSE(PackedTextDataset::Open(Options(path, 4), nullptr).ok());
}

}  // namespace
}  // namespace titan
