#ifndef TITAN_LIB_TOKENIZER_BPE_TOKENIZER_H_
#define TITAN_LIB_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/tokenizer/tokenizer.h"

namespace titan {

// GPT-2's pre-tokenizer split (HF ByteLevel with use_regex).
inline constexpr absl::string_view kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's pre-tokenizer split (its tokenizer.json Split and its tiktoken pat_str).
inline constexpr absl::string_view kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Everything a byte-level BPE tokenizer needs, in bytes: built from an HF tokenizer.json or a
// tiktoken rank file.
struct BpeModel {
  // One step of the pre-tokenizer, applied in order to every piece the previous steps produced.
  struct PreTokenizeStep {
    // Prepend ' ' to a piece that does not start with one (HF ByteLevel add_prefix_space).
    bool add_prefix_space = false;
    // Split into matches and the gaps between them (HF Split "Isolated"); none: no split (an
    // empty regex splits every character apart, as in tokenizers).
    std::optional<std::string> split_regex;
  };
  struct Merge {
    int32_t priority;  // Lower merges first.
    int32_t merged_id;
  };
  // A token matched verbatim in the raw text before pre-tokenization (HF added/special tokens).
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip = false;  // The match swallows whitespace before it.
    bool rstrip = false;  // The match swallows whitespace after it.
    // HF matches non-normalized tokens first, then normalized ones in what is left.
    bool normalized = false;
    // Matched only under SpecialTokenText::kParse (HF "special"; every tiktoken special token).
    bool special = false;
  };

  // How Decode joins the ids' id_to_bytes, as HF's decoder (tiktoken: kByteLevel).
  enum class Decoding {
    kByteLevel,           // Concatenated: id_to_bytes holds the bytes ByteLevel decodes to.
    kTokensSpaced,        // No decoder: the token strings joined by spaces.
    kTokensConcatenated,  // An empty decoder Sequence: the token strings concatenated.
  };
  Decoding decoding = Decoding::kByteLevel;
  // Bytes each id decodes to, indexed by id; nullopt for an unused id.
  std::vector<std::optional<std::string>> id_to_bytes;
  // Ids BPE may produce, by their bytes.
  absl::flat_hash_map<std::string, int32_t> bytes_to_id;
  // (left id, right id) -> merge.
  absl::flat_hash_map<std::pair<int32_t, int32_t>, Merge> merges;
  // HF NFC normalizer: what the non-normalized added tokens leave is NFC-normalized before the
  // normalized added tokens and the pre-tokenizer see it.
  bool nfc = false;
  std::vector<PreTokenizeStep> pre_tokenizer;
  // A piece that is itself a token is emitted whole (HF ignore_merges; tiktoken always).
  bool ignore_merges = false;
  // Stands for a byte with no token; without it such bytes are dropped (HF BPE without unk_token).
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;  // Consecutive unknown bytes give one unk.
  std::vector<AddedToken> added_tokens;
  std::optional<int32_t> bos_id;  // None: no BOS is added.
  int32_t eos_id = -1;
};

// Byte-level BPE: added tokens are cut out of the text first, the rest is pre-tokenized by regex
// and each piece is merged by merge priority (lowest first, leftmost on ties), as HF `tokenizers`
// and `tiktoken` do. Thread-safe.
class BpeTokenizer : public Tokenizer {
 public:
  // Validates `model` (ids in range, BOS (if any) and EOS known) and compiles its regexes.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(BpeModel model);
  ~BpeTokenizer() override;

  using Tokenizer::Encode;
  std::vector<int32_t> Encode(absl::string_view text, bool add_bos, bool add_eos,
                              SpecialTokenText special_text) const override;
  using Tokenizer::Decode;
  // Concatenates the bytes of `ids` (spaced for BpeModel::Decoding::kTokensSpaced); the result
  // may end inside a UTF-8 character when the ids split one. An unknown id fails naming it
  // (kError) or decodes as nothing (kEmpty).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     UnknownIds unknown) const override;

  std::optional<int32_t> bos_id() const override { return model_.bos_id; }
  int32_t eos_id() const override { return model_.eos_id; }
  int64_t vocab_size() const override { return static_cast<int64_t>(model_.id_to_bytes.size()); }

 private:
  class Regex;

  explicit BpeTokenizer(BpeModel model);

  // Pre-tokenizes `text` (no added tokens inside) from step `step` on and encodes each piece.
  void EncodeOrdinaryText(absl::string_view text, size_t step, std::vector<int32_t>* ids) const;
  void EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const;
  void MergePiece(absl::string_view piece, std::vector<int32_t>* ids) const;

  BpeModel model_;
  std::vector<std::unique_ptr<Regex>> step_regexes_;  // Parallel to model_.pre_tokenizer.
  std::array<int32_t, 256> byte_ids_;                 // -1: the byte has no token.
  // An added token and the length of the text it matches: a normalized token's content
  // normalized, as the text it is searched in is (tokenizers normalizes both).
  struct AddedTokenMatch {
    const BpeModel::AddedToken* token;
    size_t length;
  };
  // One pass's added tokens as a byte trie (hand-written: no Aho-Corasick library is among
  // titan's dependencies): a search costs the text's length times the longest match, however
  // many tokens there are.
  class AddedTokenTrie {
   public:
    AddedTokenTrie() { root_children_.fill(-1); }
    // Adds `token` matching `text`; a text added before keeps its first token.
    void Add(const BpeModel::AddedToken* token, absl::string_view text);
    // The longest token matching `text` at `pos`, or nullptr.
    const AddedTokenMatch* LongestAt(absl::string_view text, size_t pos) const;

   private:
    // The child of `node` by `byte`, or -1.
    int32_t Child(int32_t node, uint8_t byte) const;

    std::vector<AddedTokenMatch> matches_;
    std::vector<int32_t> node_match_ = {-1};  // Index into matches_ by node; -1: none. 0: root.
    // The root's children by an array: most text bytes start no token, and that test is per byte.
    std::array<int32_t, 256> root_children_;
    absl::flat_hash_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node, not root.
  };
  // Non-normalized added tokens, then normalized ones.
  std::array<AddedTokenTrie, 2> added_by_pass_;

  static constexpr size_t kMaxCachedPieces = 1 << 16;
  // std::mutex: absl::Mutex's deadlock detection in Debian's build costs more than the lookup.
  mutable std::mutex cache_mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> piece_cache_;  // By cache_mutex_.
};

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_BPE_TOKENIZER_H_
