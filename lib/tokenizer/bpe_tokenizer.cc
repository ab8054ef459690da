#include "lib/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <optional>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/tokenizer/nfc.h"
#include "lib/util/pcre2_code.h"
#include "lib/util/short_text.h"

namespace titan {
namespace {

// A regex quoted in an error: real split regexes show whole, a huge one (user data) is cut.
constexpr size_t kRegexQuoteBytes = 256;

// Unicode White_Space, the set HF uses to strip around lstrip/rstrip added tokens.
bool IsUnicodeWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Decodes the UTF-8 character starting at `pos` and its length; a stray byte decodes as itself.
std::pair<uint32_t, size_t> DecodeUtf8At(absl::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = byte(pos);
  size_t len = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
  if (pos + len > s.size()) len = 1;
  if (len == 1) return {lead, 1};
  uint32_t cp = lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return {lead, 1};
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  return {cp, len};
}

// Start of the UTF-8 character that ends just before `pos` (pos > 0).
size_t PreviousCharStart(absl::string_view s, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && pos - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return DecodeUtf8At(s, start).second == pos - start ? start : pos - 1;
}

// PCRE2 10.42's JIT misses matches of a lazy quantifier inside an atomic group or a possessive
// quantifier ((?>x+?)c on xxc) that its interpreter finds. Textual: a false positive (a ++ in a
// class) only costs speed.
bool JitMayMissMatches(absl::string_view pattern) {
  const auto contains_any = [&](std::initializer_list<absl::string_view> parts) {
    return std::any_of(parts.begin(), parts.end(),
                       [&](absl::string_view part) { return absl::StrContains(pattern, part); });
  };
  return contains_any({"(?>", "++", "*+", "?+", "}+"}) && contains_any({"+?", "*?", "??", "}?"});
}

}  // namespace

// A PCRE2 pattern compiled with Unicode properties and JIT where JIT matches as the interpreter;
// matching is thread-safe.
class BpeTokenizer::Regex {
 public:
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern) {
    // MATCH_INVALID_UTF: text is user input, so invalid UTF-8 must not abort matching.
    absl::StatusOr<Pcre2Code> code = CompilePcre2(pattern, PCRE2_UCP | PCRE2_MATCH_INVALID_UTF);
    if (!code.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex /",
                                                     ShortText(pattern, kRegexQuoteBytes),
                                                     "/: ", code.status().message()));
    }
    // Without JIT (an unsupported CPU, or a pattern it may mismatch) PCRE2 runs its interpreter.
    if (!JitMayMissMatches(pattern)) pcre2_jit_compile(code->get(), PCRE2_JIT_COMPLETE);
    return std::unique_ptr<Regex>(new Regex(pattern, *std::move(code)));
  }

  // Calls `emit` with each non-empty match and each non-empty gap between matches, in order, as
  // tokenizers' Split splits by the onig crate's find_iter: an empty match is a split point,
  // except one right where the previous match ended.
  template <typename Emit>
  void Split(absl::string_view text, Emit emit) const {
    pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t search_from = 0;
    size_t piece_start = 0;  // Where the text not yet emitted starts.
    std::optional<size_t> last_match_end;
    while (search_from <= text.size()) {
      const int rc = pcre2_match(code_.get(), subject, text.size(), search_from, 0, match, nullptr);
      if (rc < 0) {  // No match: the rest is one gap.
        if (rc != PCRE2_ERROR_NOMATCH) LogMatchError(rc, search_from, text.size());
        break;
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const size_t start = ovector[0];
      const size_t end = ovector[1];
      if (start == end && last_match_end == end) {
        search_from = end < text.size() ? end + DecodeUtf8At(text, end).second : end + 1;
        continue;
      }
      search_from = end;
      last_match_end = end;
      if (start > piece_start) emit(text.substr(piece_start, start - piece_start));
      if (end > start) emit(text.substr(start, end - start));
      piece_start = end;
    }
    if (piece_start < text.size()) emit(text.substr(piece_start));
    pcre2_match_data_free(match);
  }

 private:
  Regex(const std::string& pattern, Pcre2Code code) : pattern_(pattern), code_(std::move(code)) {}

  // PCRE2's limits differ from Oniguruma's (which tokenizers raises on hitting); Encode has no
  // error to return, so the first failure is logged and the rest of the text kept as one piece.
  void LogMatchError(int rc, size_t offset, size_t size) const {
    if (error_logged_.exchange(true)) return;
    LOG(ERROR) << "pre-tokenizer regex /" << ShortText(pattern_, kRegexQuoteBytes)
               << "/: PCRE2 failed to match at byte " << offset << " of a " << size
               << "-byte text: " << Pcre2ErrorMessage(rc)
               << "; the rest of the text is encoded as one piece, which tokenizers may split "
                  "otherwise. Logged once per regex.";
  }

  const std::string pattern_;
  const Pcre2Code code_;
  mutable std::atomic<bool> error_logged_{false};
};

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)) {}
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeModel model) {
  const int64_t size = static_cast<int64_t>(model.id_to_bytes.size());
  const auto known = [&](int32_t id) {
    return id >= 0 && id < size && model.id_to_bytes[id].has_value();
  };
  for (const auto& [bytes, id] : model.bytes_to_id) {
    if (!known(id)) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is out of range"));
  }
  for (const auto& [pair, merge] : model.merges) {
    if (!known(pair.first) || !known(pair.second) || !known(merge.merged_id)) {
      return absl::InvalidArgumentError(absl::StrCat("merge (", pair.first, ", ", pair.second,
                                                     ") -> ", merge.merged_id, " names an unknown id"));
    }
  }
  for (const BpeModel::AddedToken& token : model.added_tokens) {
    if (!known(token.id) || token.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token \"", token.content, "\" has unknown id ", token.id));
    }
  }
  if (model.unk_id.has_value() && !known(*model.unk_id)) {
    return absl::InvalidArgumentError(absl::StrCat("unk id ", *model.unk_id, " is unknown"));
  }
  if (model.bos_id.has_value() && !known(*model.bos_id)) {
    return absl::InvalidArgumentError(absl::StrCat("BOS id ", *model.bos_id, " is not a token"));
  }
  if (!known(model.eos_id)) {
    return absl::InvalidArgumentError(absl::StrCat("EOS id ", model.eos_id, " is not a token"));
  }
  std::vector<std::unique_ptr<Regex>> regexes;
  for (const BpeModel::PreTokenizeStep& step : model.pre_tokenizer) {
    if (!step.split_regex.has_value()) {
      regexes.push_back(nullptr);
      continue;
    }
    absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(*step.split_regex);
    if (!regex.ok()) return regex.status();
    regexes.push_back(*std::move(regex));
  }

  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer(std::move(model)));
  tokenizer->step_regexes_ = std::move(regexes);
  for (int b = 0; b < 256; ++b) {
    const auto it = tokenizer->model_.bytes_to_id.find(std::string(1, static_cast<char>(b)));
    tokenizer->byte_ids_[b] = it == tokenizer->model_.bytes_to_id.end() ? -1 : it->second;
  }
  for (const BpeModel::AddedToken& token : tokenizer->model_.added_tokens) {
    const std::string text =
        token.normalized && tokenizer->model_.nfc ? NfcNormalize(token.content) : token.content;
    tokenizer->added_by_pass_[token.normalized ? 1 : 0].Add(&token, text);
  }
  return tokenizer;
}

void BpeTokenizer::AddedTokenTrie::Add(const BpeModel::AddedToken* token, absl::string_view text) {
  int32_t node = 0;
  for (const char c : text) {
    const uint8_t byte = static_cast<uint8_t>(c);
    int32_t child = Child(node, byte);
    if (child < 0) {
      child = static_cast<int32_t>(node_match_.size());
      node_match_.push_back(-1);
      if (node == 0) {
        root_children_[byte] = child;
      } else {
        edges_.emplace((static_cast<uint64_t>(node) << 8) | byte, child);
      }
    }
    node = child;
  }
  if (node_match_[node] >= 0) return;
  node_match_[node] = static_cast<int32_t>(matches_.size());
  matches_.push_back({token, text.size()});
}

int32_t BpeTokenizer::AddedTokenTrie::Child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  const auto edge = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return edge == edges_.end() ? -1 : edge->second;
}

const BpeTokenizer::AddedTokenMatch* BpeTokenizer::AddedTokenTrie::LongestAt(absl::string_view text,
                                                                             size_t pos) const {
  const AddedTokenMatch* longest = nullptr;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (node_match_[node] >= 0) longest = &matches_[node_match_[node]];
  }
  return longest;
}

std::vector<int32_t> BpeTokenizer::Encode(absl::string_view text, bool add_bos, bool add_eos,
                                          SpecialTokenText special_text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos && model_.bos_id.has_value()) ids.push_back(*model_.bos_id);

  // Cuts the added tokens of pass `pass` out of `segment`; what is left goes to the next pass.
  const auto split_pass = [&](auto& self, absl::string_view segment, size_t pass) -> void {
    std::string normalized;  // Outlives the recursion on its pieces.
    if (pass == 1 && model_.nfc) {
      normalized = NfcNormalize(segment);
      segment = normalized;
    }
    if (pass == added_by_pass_.size()) {
      EncodeOrdinaryText(segment, 0, &ids);
      return;
    }
    const AddedTokenTrie& trie = added_by_pass_[pass];
    // As tokenizers: matches are found in the raw segment, then stripped; a stripped span may
    // cover the next matches, which still count, and `emitted` may move back to such a match's end.
    size_t emitted = 0;
    size_t pos = 0;
    // The whitespace run the last rstrip went over, from where it started.
    size_t whitespace_from = 1, whitespace_end = 0;
    while (pos < segment.size()) {
      const AddedTokenMatch* match = trie.LongestAt(segment, pos);
      if (match == nullptr) {
        ++pos;
        continue;
      }
      const BpeModel::AddedToken* found = match->token;
      size_t start = pos;
      size_t stop = pos + match->length;
      pos = stop;
      // Stepped over, not searched again, as `tokenizers` skips such a match.
      if (found->special && special_text == SpecialTokenText::kPlain) continue;
      if (found->lstrip) {
        // tokenizers strips back to the text's start, then keeps max(that, emitted).
        start = std::max(start, emitted);
        while (start > emitted) {
          const size_t prev = PreviousCharStart(segment, start);
          if (!IsUnicodeWhitespace(DecodeUtf8At(segment, prev).first)) break;
          start = prev;
        }
      }
      if (found->rstrip) {
        // A match inside the last stripped run strips to its end: linear in a long run.
        if (stop < whitespace_from || stop > whitespace_end) {
          whitespace_from = stop;
          whitespace_end = stop;
          while (whitespace_end < segment.size()) {
            const auto [cp, len] = DecodeUtf8At(segment, whitespace_end);
            if (!IsUnicodeWhitespace(cp)) break;
            whitespace_end += len;
          }
        }
        stop = whitespace_end;
      }
      if (start > emitted) self(self, segment.substr(emitted, start - emitted), pass + 1);
      // An lstrip token whose span the previous token's stripping took whole is dropped, as
      // tokenizers drops an empty split (where the span ends before it starts, tokenizers panics).
      if (start < stop) ids.push_back(found->id);
      emitted = std::max(start, stop);
    }
    if (emitted < segment.size()) self(self, segment.substr(emitted), pass + 1);
  };
  split_pass(split_pass, text, 0);

  if (add_eos) ids.push_back(model_.eos_id);
  return ids;
}

void BpeTokenizer::EncodeOrdinaryText(absl::string_view text, size_t step,
                                      std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (step == model_.pre_tokenizer.size()) {
    EncodePiece(text, ids);
    return;
  }
  const BpeModel::PreTokenizeStep& spec = model_.pre_tokenizer[step];
  std::string prefixed;
  if (spec.add_prefix_space && text[0] != ' ') {
    prefixed = absl::StrCat(" ", text);
    text = prefixed;
  }
  const Regex* regex = step_regexes_[step].get();
  if (regex == nullptr) {
    EncodeOrdinaryText(text, step + 1, ids);
    return;
  }
  regex->Split(text, [&](absl::string_view piece) { EncodeOrdinaryText(piece, step + 1, ids); });
}

void BpeTokenizer::EncodePiece(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (model_.ignore_merges) {
    const auto it = model_.bytes_to_id.find(piece);
    if (it != model_.bytes_to_id.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = piece_cache_.find(piece);
    if (it != piece_cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  MergePiece(piece, ids);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (piece_cache_.size() < kMaxCachedPieces) {
    piece_cache_.try_emplace(piece, ids->begin() + first, ids->end());
  }
}

void BpeTokenizer::MergePiece(absl::string_view piece, std::vector<int32_t>* ids) const {
  // A doubly linked list of symbols; a merge folds the right symbol into the left one.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (const char c : piece) {
    int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (!model_.unk_id.has_value()) continue;
      if (model_.fuse_unk && !symbols.empty() && symbols.back().id == *model_.unk_id) continue;
      id = *model_.unk_id;
    }
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t priority;
    int32_t left;  // Index of the left symbol; ties go to the leftmost pair.
    int32_t merged_id;
    bool operator>(const Candidate& other) const {
      return priority != other.priority ? priority > other.priority : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push_pair = [&](int32_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const auto it = model_.merges.find({symbols[left].id, symbols[symbols[left].next].id});
    if (it != model_.merges.end()) queue.push({it->second.priority, left, it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.id < 0 || left.next < 0) continue;  // Folded away or now last.
    // Stale when either side changed since the candidate was queued.
    const auto it = model_.merges.find({left.id, symbols[left.next].id});
    if (it == model_.merges.end() || it->second.priority != top.priority ||
        it->second.merged_id != top.merged_id) {
      continue;
    }
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    right.id = -1;
    push_pair(left.prev);
    push_pair(top.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

absl::StatusOr<std::string> BpeTokenizer::Decode(absl::Span<const int32_t> ids,
                                                 UnknownIds unknown) const {
  std::string text;
  bool first = true;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !model_.id_to_bytes[id].has_value()) {
      if (unknown == UnknownIds::kEmpty) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("cannot decode unknown token id ", id, " (vocab size ", vocab_size(), ")"));
    }
    if (model_.decoding == BpeModel::Decoding::kTokensSpaced && !first) text += ' ';
    text += *model_.id_to_bytes[id];
    first = false;
  }
  return text;
}

}  // namespace titan
