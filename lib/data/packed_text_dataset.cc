#include "lib/data/packed_text_dataset.h"

#include <openssl/sha.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "lib/data/data_files.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// `key` of `state`, which is the dataset state's field `parent` when that is not empty.
absl::StatusOr<int64_t> GetNonNegativeInt(const nlohmann::json& state, const char* key,
                                          absl::string_view parent = "") {
  auto field = state.find(key);
  if (field == state.end() || !field->is_number_integer() || field->get<int64_t>() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset state: \"", parent,
                                                   parent.empty() ? "" : ".", key,
                                                   "\": expected a non-negative integer"));
  }
  return field->get<int64_t>();
}

// SHA-256 of the first `count` of `names` joined with '\0', in hex: the files a state read before
// its current one, so that a changed order or set of them is found on resume.
std::string FilesBeforeDigest(const std::vector<std::string>& names, int64_t count) {
  const std::string joined =
      absl::StrJoin(names.begin(), names.begin() + count, absl::string_view("\0", 1));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(joined.data()), joined.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PackedTextDataset>> PackedTextDataset::Open(
    const TextDatasetOptions& options, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("text dataset: no tokenizer");
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("text dataset: seq_len must be at least 1, got ", options.seq_len));
  }
  if (options.dp_world_size < 1 || options.dp_rank < 0 ||
      options.dp_rank >= options.dp_world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("text dataset: expected 0 <= dp_rank < dp_world_size, got dp_rank ",
                     options.dp_rank, " and dp_world_size ", options.dp_world_size));
  }
  if (options.text_field.empty()) {
    return absl::InvalidArgumentError("text dataset: text_field is empty");
  }
  std::vector<std::string> files;
  std::vector<std::string> names;
  std::string split;
  absl::Status status = ListDataFiles(options.path, options.split, &files, &names, &split);
  if (!status.ok()) return status;
  return std::unique_ptr<PackedTextDataset>(new PackedTextDataset(
      options, tokenizer, std::move(files), std::move(names), std::move(split)));
}

PackedTextDataset::PackedTextDataset(const TextDatasetOptions& options, const Tokenizer* tokenizer,
                                     std::vector<std::string> files,
                                     std::vector<std::string> file_names, std::string split)
    : options_(options),
      tokenizer_(tokenizer),
      files_(std::move(files)),
      file_names_(std::move(file_names)),
      split_(std::move(split)) {}

absl::StatusOr<std::vector<int32_t>> PackedTextDataset::NextWindow() {
  for (int rank = 0; rank < options_.dp_rank; ++rank) {
    absl::Status status = TakeWindow(nullptr);
    if (!status.ok()) return status;
  }
  std::vector<int32_t> window;
  absl::Status status = TakeWindow(&window);
  if (!status.ok()) return status;
  // Finishing the round keeps every rank's state identical; running out here ends the next call.
  for (int rank = options_.dp_rank + 1; rank < options_.dp_world_size; ++rank) {
    status = TakeWindow(nullptr);
    if (absl::IsOutOfRange(status)) break;
    if (!status.ok()) return status;
  }
  return window;
}

absl::Status PackedTextDataset::TakeWindow(std::vector<int32_t>* window) {
  const size_t window_size = static_cast<size_t>(options_.seq_len) + 1;
  if (locate_document_) LocateDocument();
  while (tokens_.size() - tokens_start_ < window_size) {
    absl::Status status = ReadDocument();
    if (!status.ok()) return status;
  }
  if (window != nullptr) {
    window->assign(tokens_.begin() + tokens_start_, tokens_.begin() + tokens_start_ + window_size);
  }
  tokens_start_ += window_size;
  ++windows_consumed_;
  return absl::OkStatus();
}

absl::Status PackedTextDataset::ReadDocument() {
  if (restore_from_token_.has_value()) return RestoreDocument();
  tokens_.erase(tokens_.begin(), tokens_.begin() + tokens_start_);
  tokens_start_ = 0;
  while (true) {
    if (file_index_ == static_cast<int64_t>(files_.size())) {
      if (!options_.infinite) {
        return absl::OutOfRangeError(
            absl::StrCat(options_.path, ": end of data after ", windows_consumed_, " windows"));
      }
      if (documents_in_epoch_ == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(options_.path, ": no documents in a whole pass over the data"));
      }
      ++epoch_;
      documents_in_epoch_ = 0;
      file_index_ = 0;
      file_position_ = {};
      document_start_ = std::nullopt;
    }
    if (reader_ == nullptr) {
      absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
          JsonDocumentReader::Open(files_[file_index_], options_.text_field, file_position_);
      if (!reader.ok()) return ResumeHint(reader.status());
      reader_ = std::move(*reader);
    }
    absl::StatusOr<std::optional<std::string>> text = reader_->Next();
    if (!text.ok()) return ResumeHint(text.status());
    resumed_at_ = std::nullopt;
    if (!text->has_value()) {
      reader_.reset();
      ++file_index_;
      file_position_ = {};
      document_start_ = std::nullopt;
      continue;
    }
    document_start_ = file_position_;
    file_position_ = reader_->position();
    ++documents_in_epoch_;
    const std::vector<int32_t> ids = Tokenize(**text);
    document_tokens_ = static_cast<int64_t>(ids.size());
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    return absl::OkStatus();
  }
}

absl::Status PackedTextDataset::RestoreDocument() {
  const std::string& path = files_[file_index_];
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(path, options_.text_field, *document_start_);
  if (!reader.ok()) return ResumeHint(reader.status());
  absl::StatusOr<std::optional<std::string>> text = (*reader)->Next();
  if (!text.ok()) return ResumeHint(text.status());
  std::vector<int32_t> ids;
  if (text->has_value()) ids = Tokenize(**text);
  // Tokenization is deterministic: the same document at the same place gives the same tokens,
  // so skipping the windowed ones lands where the saved run stood.
  const DocumentPosition end = (*reader)->position();
  if (!text->has_value() || end.byte_offset != file_position_.byte_offset ||
      end.line != file_position_.line || static_cast<int64_t>(ids.size()) != document_tokens_) {
    return absl::DataLossError(absl::StrCat(
        path, ": the checkpoint recorded a document of ", document_tokens_, " tokens from byte ",
        document_start_->byte_offset, " to byte ", file_position_.byte_offset, ", found ",
        text->has_value()
            ? absl::StrCat("one of ", ids.size(), " tokens ending at byte ", end.byte_offset)
            : std::string("the end of the file"),
        ": has the file or the tokenizer changed since?"));
  }
  tokens_ = std::move(ids);
  tokens_start_ = static_cast<size_t>(*restore_from_token_);
  restore_from_token_ = std::nullopt;
  reader_ = std::move(*reader);  // at file_position_, where the next document starts
  resumed_at_ = std::nullopt;
  return absl::OkStatus();
}

void PackedTextDataset::LocateDocument() {
  locate_document_ = false;
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(files_[file_index_], options_.text_field);
  if (!reader.ok()) return;
  while (true) {
    const DocumentPosition start = (*reader)->position();
    absl::StatusOr<std::optional<std::string>> text = (*reader)->Next();
    if (!text.ok() || !text->has_value()) return;
    const DocumentPosition end = (*reader)->position();
    if (end.byte_offset < file_position_.byte_offset) continue;
    if (end.byte_offset != file_position_.byte_offset || end.line != file_position_.line) return;
    // Named only if the listed tokens are the last ones of this document, as they were saved.
    const std::vector<int32_t> ids = Tokenize(**text);
    const size_t pending = tokens_.size() - tokens_start_;
    if (ids.size() >= pending &&
        std::equal(tokens_.begin() + tokens_start_, tokens_.end(), ids.end() - pending)) {
      document_start_ = start;
      document_tokens_ = static_cast<int64_t>(ids.size());
    }
    return;
  }
}

std::vector<int32_t> PackedTextDataset::Tokenize(const std::string& text) const {
  // Special-token text in a document is data: a "<|begin_of_text|>" inside it must not become
  // a BOS that block_causal masking would take for the start of another document.
  return tokenizer_->Encode(text, /*add_bos=*/true, /*add_eos=*/true, SpecialTokenText::kPlain);
}

std::string PackedTextDataset::DataName() const {
  if (split_.empty()) return options_.path;
  // Older titans read every data file of a folder: a checkpoint of theirs names the others.
  return absl::StrCat(options_.path, " (its \"", split_,
                      "\" split by Hugging Face datasets' file naming, which titan reads since)");
}

std::string PackedTextDataset::DescribeMovedFile(const std::string& saved_file,
                                                 int64_t file_index) const {
  const int64_t num_files = static_cast<int64_t>(files_.size());
  const std::string now =
      file_index < num_files
          ? absl::StrCat("file #", file_index, " is now \"", file_names_[file_index], "\"")
          : absl::StrCat("it holds ", num_files, num_files == 1 ? " data file" : " data files",
                         " now");
  if (saved_file.empty()) {
    return absl::StrCat("the checkpoint had read all ", file_index, " data files of ", DataName(),
                        ", but ", now);
  }
  const std::string stopped = absl::StrCat("the checkpoint stopped in \"", saved_file, "\" (file #",
                                           file_index, " of ", DataName(), ")");
  auto moved = std::find(file_names_.begin(), file_names_.end(), saved_file);
  if (moved != file_names_.end()) {
    return absl::StrCat(stopped, ", which is file #", moved - file_names_.begin(),
                        " now (the files before it changed since)");
  }
  return absl::StrCat(stopped, ", which is not among its data files now (", now, ")");
}

absl::Status PackedTextDataset::ResumeHint(const absl::Status& status) const {
  if (!resumed_at_.has_value()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (reading on from byte ", *resumed_at_,
                                   " as the checkpoint recorded: has the file changed since?)"));
}

nlohmann::json PackedTextDataset::StateDict() const {
  const bool exhausted = file_index_ == static_cast<int64_t>(files_.size());
  nlohmann::json state = {
      {"seq_len", options_.seq_len},
      {"epoch", epoch_},
      {"file_index", file_index_},
      {"file", exhausted ? std::string() : file_names_[file_index_]},
      {"files_before_sha256", FilesBeforeDigest(file_names_, file_index_)},
      {"byte_offset", file_position_.byte_offset},
      {"line", file_position_.line},
      {"documents_in_epoch", documents_in_epoch_},
      {"windows_consumed", windows_consumed_},
  };
  const int64_t pending = restore_from_token_.has_value()
                              ? document_tokens_ - *restore_from_token_
                              : static_cast<int64_t>(tokens_.size() - tokens_start_);
  // Between NextWindow calls the unwindowed tokens are the last ones of the document that ends at
  // file_position_: the window that took the first token after them took every earlier one. A
  // document can hold millions of tokens, so the state names it rather than listing them.
  if (pending > 0 && !exhausted && document_start_.has_value() && pending <= document_tokens_) {
    state["document"] = {
        {"byte_offset", document_start_->byte_offset},
        {"line", document_start_->line},
        {"num_tokens", document_tokens_},
        {"consumed_tokens", document_tokens_ - pending},
    };
  } else {
    // None, or under a window's worth at the end of a finite dataset or after an older state
    // (whose document start is not recorded: see LocateDocument).
    state["tokens"] = std::vector<int32_t>(tokens_.begin() + tokens_start_, tokens_.end());
  }
  return state;
}

absl::Status PackedTextDataset::LoadStateDict(const nlohmann::json& state) {
  if (!state.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset state: expected a JSON object, got ", state.type_name()));
  }
  absl::StatusOr<int64_t> seq_len = GetNonNegativeInt(state, "seq_len");
  absl::StatusOr<int64_t> epoch = GetNonNegativeInt(state, "epoch");
  absl::StatusOr<int64_t> file_index = GetNonNegativeInt(state, "file_index");
  absl::StatusOr<int64_t> byte_offset = GetNonNegativeInt(state, "byte_offset");
  absl::StatusOr<int64_t> line = GetNonNegativeInt(state, "line");
  absl::StatusOr<int64_t> documents = GetNonNegativeInt(state, "documents_in_epoch");
  absl::StatusOr<int64_t> windows = GetNonNegativeInt(state, "windows_consumed");
  for (const absl::Status& status :
       {seq_len.status(), epoch.status(), file_index.status(), byte_offset.status(), line.status(),
        documents.status(), windows.status()}) {
    if (!status.ok()) return status;
  }
  if (*seq_len != options_.seq_len) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset state: saved with seq_len ", *seq_len, ", this run has ", options_.seq_len));
  }
  auto file = state.find("file");
  if (file == state.end() || !file->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset state: \"file\": expected the name of the file it stopped in, got ",
                     file == state.end() ? "nothing" : file->dump()));
  }
  const int64_t num_files = static_cast<int64_t>(files_.size());
  const bool exhausted = *file_index == num_files;
  const std::string& saved_file = file->get_ref<const std::string&>();
  if (*file_index > num_files || saved_file.empty() != exhausted ||
      (!exhausted && saved_file != file_names_[*file_index])) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset state: ", DescribeMovedFile(saved_file, *file_index),
                     "; restore the data files to resume where the checkpoint stopped"));
  }
  // Older titans did not record the files before the current one: only its name is checked.
  auto files_before = state.find("files_before_sha256");
  if (files_before != state.end() &&
      (!files_before->is_string() ||
       files_before->get<std::string>() != FilesBeforeDigest(file_names_, *file_index))) {
    const std::string read = exhausted ? absl::StrCat("all ", *file_index, " data files of ")
                                       : absl::StrCat("the ", *file_index, " data files before \"",
                                                      saved_file, "\" in ");
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset state: ", read, DataName(),
        " are not those the checkpoint read (files added, removed, renamed or reordered since), "
        "so resuming would skip or repeat data; restore them to resume where it stopped"));
  }
  std::vector<int32_t> pending;
  std::optional<DocumentPosition> document_start;
  int64_t document_tokens = 0;
  std::optional<int64_t> restore_from_token;
  auto document = state.find("document");
  auto tokens = state.find("tokens");
  if (document != state.end()) {
    if (!document->is_object() || tokens != state.end()) {
      return absl::InvalidArgumentError(
          "dataset state: \"document\": expected a JSON object, and no \"tokens\" beside it");
    }
    absl::StatusOr<int64_t> start = GetNonNegativeInt(*document, "byte_offset", "document");
    absl::StatusOr<int64_t> start_line = GetNonNegativeInt(*document, "line", "document");
    absl::StatusOr<int64_t> num_tokens = GetNonNegativeInt(*document, "num_tokens", "document");
    absl::StatusOr<int64_t> consumed = GetNonNegativeInt(*document, "consumed_tokens", "document");
    for (const absl::Status& status :
         {start.status(), start_line.status(), num_tokens.status(), consumed.status()}) {
      if (!status.ok()) return status;
    }
    if (exhausted || *start >= *byte_offset || *start_line > *line || *consumed >= *num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset state: \"document\": expected a document of file #", *file_index,
          " that ends at byte ", *byte_offset, " with tokens left, got ", document->dump()));
    }
    document_start = DocumentPosition{*start, *start_line};
    document_tokens = *num_tokens;
    restore_from_token = *consumed;
  } else {
    // Older titans listed the unwindowed tokens themselves.
    if (tokens == state.end() || !tokens->is_array()) {
      return absl::InvalidArgumentError(
          "dataset state: \"tokens\": expected an array of token ids");
    }
    pending.reserve(tokens->size());
    for (const nlohmann::json& id : *tokens) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= tokenizer_->vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("dataset state: \"tokens\": expected ids in [0, ",
                         tokenizer_->vocab_size(), "), got ", id.dump()));
      }
      pending.push_back(id.get<int32_t>());
    }
  }
  epoch_ = *epoch;
  file_index_ = *file_index;
  file_position_ = {*byte_offset, *line};
  if (document_start.has_value()) {
    resumed_at_ = document_start->byte_offset;
  } else {
    resumed_at_ = file_position_.byte_offset > 0
                      ? std::optional<int64_t>(file_position_.byte_offset)
                      : std::nullopt;
  }
  reader_.reset();
  documents_in_epoch_ = *documents;
  windows_consumed_ = *windows;
  // Under a window's worth the listed tokens are windowed at the next call anyway.
  locate_document_ = !document_start.has_value() &&
                     file_index_ < static_cast<int64_t>(files_.size()) &&
                     pending.size() > static_cast<size_t>(options_.seq_len) + 1;
  tokens_ = std::move(pending);
  tokens_start_ = 0;
  document_start_ = document_start;
  document_tokens_ = document_tokens;
  restore_from_token_ = restore_from_token;
  return absl::OkStatus();
}

}  // namespace titan
