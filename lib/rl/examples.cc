#include "lib/rl/examples.h"

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/rl/rewards.h"
#include "lib/util/gzip_file.h"
#include "lib/util/json_fields.h"
#include "lib/util/short_text.h"
#include "lib/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

absl::StatusOr<std::string> StringField(const nlohmann::json& object, const char* key,
                                        bool required, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(absl::StrCat(where, ": no \"", key, "\" field"));
  }
  if (it->is_string()) return it->get<std::string>();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": \"", key, "\" must be a string, got ", it->type_name()));
}

// A JSON-lines row: its object, and the text of each top-level number nlohmann holds as a double,
// as written (a double keeps 17 digits: 123456789012345678901234567890 would read
// 123456789012345677877719597056).
struct JsonRow {
  nlohmann::json object;
  absl::flat_hash_map<std::string, std::string> float_text;
};

// Builds a row's DOM as json::parse does, also keeping JsonRow::float_text (the parser hands SAX
// handlers each number's text; the DOM drops it). A parse error is kept, not thrown.
class RowBuilder : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit RowBuilder(JsonRow& row) : row_(row) {}

  bool null() override { return Add(nullptr); }
  bool boolean(bool value) override { return Add(value); }
  bool number_integer(number_integer_t value) override { return Add(value); }
  bool number_unsigned(number_unsigned_t value) override { return Add(value); }
  bool number_float(number_float_t value, const string_t& text) override {
    if (open_.size() == 1) row_.float_text[key_] = text;
    return Add(value);
  }
  bool string(string_t& value) override { return Add(std::move(value)); }
  bool binary(binary_t& value) override { return Add(nlohmann::json::binary(std::move(value))); }
  bool start_object(std::size_t /*elements*/) override { return Open(nlohmann::json::object()); }
  bool key(string_t& key) override {
    if (open_.size() == 1) {
      key_ = key;
      row_.float_text.erase(key);  // a repeated key's value replaces the first's
    }
    member_ = &(*open_.back())[key];
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) override { return Open(nlohmann::json::array()); }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::json::exception& error) override {
    error_id_ = error.id;
    error_ = error.what();
    return false;
  }

  // nlohmann's exception id (406: a number out of range) and what(), after a parse error.
  int error_id() const { return error_id_; }
  const std::string& error() const { return error_; }

 private:
  // Places `value` in the innermost open array or object (at the key just read), or as the row.
  bool Add(nlohmann::json value) {
    Place(std::move(value));
    return true;
  }
  bool Open(nlohmann::json container) {
    open_.push_back(Place(std::move(container)));
    return true;
  }
  nlohmann::json* Place(nlohmann::json value) {
    if (open_.empty()) {
      row_.object = std::move(value);
      return &row_.object;
    }
    if (open_.back()->is_array()) {
      open_.back()->push_back(std::move(value));
      return &open_.back()->back();
    }
    *member_ = std::move(value);
    return member_;
  }

  JsonRow& row_;
  std::vector<nlohmann::json*> open_;  // the arrays and objects being read, outermost first
  nlohmann::json* member_ = nullptr;   // the innermost object's member for the key just read
  std::string key_;                    // the row's key being read
  int error_id_ = 0;
  std::string error_;
};

// "answer": a string, or a JSON number (GSM8K-style data writes 72) as plain decimal text with its
// digits as written (72.0 reads "72", 1.5e-7 "0.00000015", a 30-digit integer its 30 digits): the
// numeric verifier compares text it reads as -?[0-9.,]+.
absl::StatusOr<std::string> AnswerField(const JsonRow& row, const std::string& where) {
  auto it = row.object.find("answer");
  if (it == row.object.end() || !it->is_number()) {
    return StringField(row.object, "answer", false, where);
  }
  // An integer nlohmann holds (64 bits) dumps as written.
  const auto text = row.float_text.find("answer");
  const std::string written = text == row.float_text.end() ? it->dump() : text->second;
  absl::StatusOr<std::string> decimal = JsonNumberDecimalText(written);
  if (!decimal.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"answer\" ", ShortText(written), ": ",
                                                   decimal.status().message(),
                                                   "; write it as a string"));
  }
  return decimal;
}

// Calls `read` with each non-blank line of the JSON-lines file `path`, plain or gzip-compressed (a
// JSON object, else the error says `expected`), and the line's "path:line" for its errors.
absl::Status ForEachObjectLine(
    const std::string& path, absl::string_view expected,
    const std::function<absl::Status(const JsonRow&, const std::string&)>& read) {
  // Gzip's magic bytes start no JSON line: such a file is read decompressed, whatever its name.
  TITAN_ASSIGN_OR_RETURN(const std::string text, ReadPlainOrGzipFile(path));
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    const std::string where = absl::StrCat(path, ":", line_number);
    JsonRow row;
    RowBuilder builder(row);
    if (!nlohmann::json::sax_parse(line, &builder)) {
      // What is wrong, where in the line: "parse error at line 1, column 9: ... ill-formed UTF-8".
      absl::string_view why = builder.error();
      why.remove_prefix(std::min(why.size(), why.find("] ") + 2));
      // nlohmann quotes the token it read ("last read: '...'") whole: a 200 KB string, say. 400
      // bytes keep the description (under 200) and the token's ends.
      // 406: a number past a double's range (1e309), valid JSON that nlohmann reads no other way.
      if (builder.error_id() == 406) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": ", ShortText(why, 400), "; write such a number as a string"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not valid JSON: ", ShortText(why, 400)));
    }
    if (!row.object.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected ", expected));
    }
    TITAN_RETURN_IF_ERROR(read(row, where));
  }
  return absl::OkStatus();
}

// Arithmetic operands: held out when (a + 3b) % 7 == 0, about one pair in seven.
bool ArithmeticHeldOut(int a, int b) { return (a + 3 * b) % 7 == 0; }
// The tasks' domains: arithmetic's operands are 0 .. kArithmeticOperands - 1, sorting picks three
// of these letters.
constexpr int kArithmeticOperands = 50;
constexpr char kSortingLetters[] = "abcdefgh";

// Sorting's letters: held out when their codes sum to a multiple of 4 (14 of the 56 sets, 84
// ordered prompts).
bool SortingHeldOut(char x, char y, char z) { return (x + y + z) % 4 == 0; }

}  // namespace

absl::StatusOr<std::vector<RlExample>> ReadExamples(const std::string& path,
                                                    const std::string& algorithm) {
  std::vector<RlExample> examples;
  TITAN_RETURN_IF_ERROR(ForEachObjectLine(
      path, "a JSON object", [&](const JsonRow& row, const std::string& where) -> absl::Status {
        const nlohmann::json& object = row.object;
        RlExample example;
        example.where = where;
        example.has_answer = object.contains("answer");
        TITAN_ASSIGN_OR_RETURN(example.prompt, StringField(object, "prompt", true, where));
        TITAN_ASSIGN_OR_RETURN(example.answer, AnswerField(row, where));
        if (algorithm == "sft") {
          TITAN_ASSIGN_OR_RETURN(example.response, StringField(object, "response", true, where));
        } else if (algorithm == "dpo") {
          TITAN_ASSIGN_OR_RETURN(example.response, StringField(object, "chosen", true, where));
          TITAN_ASSIGN_OR_RETURN(example.rejected, StringField(object, "rejected", true, where));
        }
        examples.push_back(std::move(example));
        return absl::OkStatus();
      }));
  if (examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  return examples;
}

absl::Status RequireAnswers(const std::vector<RlExample>& examples, absl::string_view why) {
  for (const RlExample& example : examples) {
    if (!example.has_answer) {
      return absl::InvalidArgumentError(
          absl::StrCat(example.where, ": no \"answer\" field; ", why));
    }
  }
  return absl::OkStatus();
}

namespace {

// A row's optional `key` ("response_ids", "prompt_ids"): an array of token ids (integers >= 0;
// the vocabulary's bound is the model's, checked where it is known).
absl::Status ReadTokenIds(const nlohmann::json& object, const char* key, const std::string& where,
                          std::optional<std::vector<int64_t>>& token_ids) {
  const auto ids = object.find(key);
  if (ids == object.end()) return absl::OkStatus();
  if (!ids->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": \"", key, "\" must be an array of token ids, got ", ids->type_name()));
  }
  token_ids.emplace();
  for (size_t t = 0; t < ids->size(); ++t) {
    const nlohmann::json& id = (*ids)[t];
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\"[", t, "] is ",
                                                     JsonForMessage(id), ", not a token id"));
    }
    token_ids->push_back(id.get<int64_t>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<RewardedRollout>> ReadRewardedRollouts(const std::string& path,
                                                                  const std::string& algorithm) {
  std::vector<RewardedRollout> rollouts;
  TITAN_RETURN_IF_ERROR(ForEachObjectLine(
      path, "a JSON object with prompt, response and reward",
      [&](const JsonRow& row, const std::string& where) -> absl::Status {
        const nlohmann::json& object = row.object;
        RewardedRollout rollout;
        rollout.where = where;
        TITAN_ASSIGN_OR_RETURN(rollout.prompt, StringField(object, "prompt", true, where));
        TITAN_ASSIGN_OR_RETURN(rollout.response, StringField(object, "response", true, where));
        TITAN_RETURN_IF_ERROR(ReadTokenIds(object, "response_ids", where, rollout.response_ids));
        TITAN_RETURN_IF_ERROR(ReadTokenIds(object, "prompt_ids", where, rollout.prompt_ids));
        // As an empty encoded prompt is (the trainer's check): no token to follow.
        if (rollout.prompt_ids.has_value() && rollout.prompt_ids->empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"prompt_ids\" is empty: the response would follow no token"));
        }
        // The ids are the tokens trained on, in every algorithm: a sampled response has one at
        // least (its stop token's, had it stopped at once).
        if (rollout.response_ids.has_value() && rollout.response_ids->empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where,
              ": \"response_ids\" is empty: no token to train on (a sampled response has "
              "one at least, its stop token)"));
        }
        if (algorithm == "ppo" && !rollout.response_ids.has_value() && rollout.response.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": \"response\" is empty: ppo puts the reward on its last token"));
        }
        auto reward = object.find("reward");
        if (reward == object.end()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": no \"reward\" field"));
        }
        if (!reward->is_number()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": \"reward\" must be a number, got ", JsonForMessage(*reward)));
        }
        // Finite in double: JSON has no NaN or infinity, and the parser refuses numbers that
        // overflow.
        rollout.reward = reward->get<double>();
        if (!FitsFloat32(rollout.reward)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": \"reward\" is ", reward->dump(),
              ", beyond float32's range (magnitude at most 3.4e38), where the update computes"));
        }
        if (auto logprobs = object.find("logprobs"); logprobs != object.end()) {
          if (!logprobs->is_array()) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": \"logprobs\" must be an array of numbers, got ", logprobs->type_name()));
          }
          for (size_t t = 0; t < logprobs->size(); ++t) {
            const nlohmann::json& value = (*logprobs)[t];
            // JSON has no NaN or infinity; float32 is what the update computes in.
            if (!value.is_number() || !FitsFloat32(value.get<double>())) {
              return absl::InvalidArgumentError(absl::StrCat(where, ": \"logprobs\"[", t, "] is ",
                                                             JsonForMessage(value),
                                                             ", not a number in float32's range"));
            }
            // A probability is at most 1: a positive value is no log-probability (0 is certainty).
            if (value.get<double>() > 0) {
              return absl::InvalidArgumentError(
                  absl::StrCat(where, ": \"logprobs\"[", t, "] is ", value.dump(),
                               ", not a log-probability (at most 0)"));
            }
            rollout.logprobs.push_back(value.get<double>());
          }
          rollout.has_logprobs = true;
        }
        // Old log-probabilities for some rows only would mix two behaviour policies in one step.
        if (!rollouts.empty() && rollout.has_logprobs != rollouts.front().has_logprobs) {
          const RewardedRollout& with = rollout.has_logprobs ? rollout : rollouts.front();
          const RewardedRollout& without = rollout.has_logprobs ? rollouts.front() : rollout;
          return absl::InvalidArgumentError(
              absl::StrCat(without.where, ": no \"logprobs\" field, which ", with.where,
                           " has: give every rollout's log-probabilities or none"));
        }
        rollouts.push_back(std::move(rollout));
        return absl::OkStatus();
      }));
  if (rollouts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no rollouts"));
  return rollouts;
}

absl::Status CheckRolloutGroups(const std::vector<RewardedRollout>& rollouts, int64_t group_size) {
  for (size_t i = 0; i < rollouts.size(); ++i) {
    const RewardedRollout& first = rollouts[i - i % group_size];
    const RewardedRollout& row = rollouts[i];
    // The ids are the prompt the update conditions on: a group's rows all give the same, or none.
    if (row.prompt == first.prompt && row.prompt_ids == first.prompt_ids) continue;
    const std::string differs =
        row.prompt != first.prompt
            ? absl::StrCat("prompt ", QuotedShort(row.prompt), " is not its group's (", first.where,
                           ": ", QuotedShort(first.prompt), ")")
            : absl::StrCat("\"prompt_ids\" are not its group's (", first.where,
                           "; every row of a group gives the same prompt_ids, or none does)");
    return absl::InvalidArgumentError(
        absl::StrCat(row.where, ": ", differs, ": each run of [rl] group_size = ", group_size,
                     " rows is one prompt's group; keep a prompt's rows together"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RlExample>> MakeTaskExamples(const std::string& task, int64_t count,
                                                        uint64_t seed, bool held_out) {
  std::mt19937_64 rng(seed);
  std::vector<RlExample> examples;
  // The held-out split is drawn without repeats: a prompt counted twice would weigh double.
  absl::flat_hash_set<std::string> seen;
  auto repeated = [&](const std::string& prompt) {
    return held_out && !seen.insert(prompt).second;
  };
  if (held_out) {
    int64_t distinct = 0;
    if (task == "arithmetic") {
      for (int a = 0; a < kArithmeticOperands; ++a) {
        for (int b = 0; b < kArithmeticOperands; ++b) distinct += ArithmeticHeldOut(a, b) ? 1 : 0;
      }
    } else if (task == "sorting") {
      const absl::string_view letters = kSortingLetters;
      for (char x : letters) {
        for (char y : letters) {
          for (char z : letters) distinct += x != y && y != z && x != z && SortingHeldOut(x, y, z);
        }
      }
    }
    if (count > distinct && distinct > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(count, " held-out examples asked for, but the ", task, " task has ",
                       distinct, " distinct held-out prompts"));
    }
  }
  if (task == "arithmetic") {
    std::uniform_int_distribution<int> operand(0, kArithmeticOperands - 1);
    while (static_cast<int64_t>(examples.size()) < count) {
      const int a = operand(rng), b = operand(rng);
      if (ArithmeticHeldOut(a, b) != held_out) continue;
      if (repeated(absl::StrCat(a, " + ", b))) continue;
      RlExample e;
      e.prompt = absl::StrCat("What is ", a, " + ", b, "?");
      e.answer = absl::StrCat(a + b);
      e.response = absl::StrCat(" #### ", a + b);
      e.rejected = absl::StrCat(" #### ", a + b + 1 + static_cast<int>(rng() % 9));
      examples.push_back(std::move(e));
    }
    return examples;
  }
  if (task == "sorting") {
    const std::string letters = kSortingLetters;
    while (static_cast<int64_t>(examples.size()) < count) {
      std::string picked = letters;
      std::shuffle(picked.begin(), picked.end(), rng);
      picked.resize(3);
      if (SortingHeldOut(picked[0], picked[1], picked[2]) != held_out) continue;
      if (repeated(picked)) continue;
      std::string sorted = picked;
      std::sort(sorted.begin(), sorted.end());
      std::string wrong = sorted;
      std::swap(wrong[1], wrong[1 + rng() % 2]);
      if (wrong == sorted) std::swap(wrong[0], wrong[2]);
      auto spaced = [](const std::string& s) {
        return absl::StrJoin(std::vector<std::string>{s.substr(0, 1), s.substr(1, 1), s.substr(2, 1)},
                             " ");
      };
      RlExample e;
      e.prompt = absl::StrCat("Sort: ", spaced(picked));
      e.answer = spaced(sorted);
      e.response = absl::StrCat(" #### ", spaced(sorted));
      e.rejected = absl::StrCat(" #### ", spaced(wrong));
      examples.push_back(std::move(e));
    }
    return examples;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[rl] task: unknown task \"", task, "\"; expected arithmetic or sorting"));
}

std::string ApplyChatTemplate(const std::string& template_text, const std::string& prompt) {
  return absl::StrReplaceAll(template_text, {{"{prompt}", prompt}});
}

}  // namespace titan
