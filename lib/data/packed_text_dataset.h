#ifndef TITAN_LIB_DATA_PACKED_TEXT_DATASET_H_
#define TITAN_LIB_DATA_PACKED_TEXT_DATASET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/data/json_document_reader.h"
#include "lib/tokenizer/tokenizer.h"
#include "nlohmann/json_fwd.hpp"

namespace titan {

struct TextDatasetOptions {
  // A .jsonl/.json/.jsonl.gz/.json.gz file, or a folder searched recursively for them (read in
  // order of their paths relative to the folder; files and folders whose names start with ".",
  // and folders whose names start with "__", are skipped).
  std::string path;
  // Of a folder, the split to read, "train" or "validation", by Hugging Face datasets' naming of
  // files and folders (train*, validation*, dev*, data/train-00000-of-00002.*, ...); a folder
  // whose names mark no split is read whole for either.
  std::string split = "train";
  // Key of the text in each JSON object.
  std::string text_field = "text";
  // Windows hold seq_len + 1 tokens: inputs are the first seq_len, labels the last seq_len.
  int64_t seq_len = 0;
  int dp_rank = 0;
  int dp_world_size = 1;
  // At the end of the data, start over (keeping the partial window) instead of ending.
  bool infinite = true;
};

// torchtitan's packing of a text corpus: each document is tokenized with BOS and EOS, appended
// to one token stream, and the stream is cut into consecutive, non-overlapping windows of
// seq_len + 1 tokens. Windows are split across data-parallel ranks in rounds: each NextWindow
// call consumes one round of dp_world_size global windows and returns the dp_rank-th, so the
// windows of a step over all ranks are the ones a single process reads for the same global batch.
// Every rank tokenizes the whole stream and drops the others' windows: tokenization costs
// dp_world_size times the work of one rank's share, which is cheap next to a training step.
// Not thread-safe.
class PackedTextDataset {
 public:
  // Lists the data files and checks the options; reads nothing yet. `tokenizer` must outlive
  // the dataset.
  static absl::StatusOr<std::unique_ptr<PackedTextDataset>> Open(const TextDatasetOptions& options,
                                                                 const Tokenizer* tokenizer);

  // This rank's next window of seq_len + 1 token ids. OutOfRange once the data is exhausted
  // (only when !infinite; the final partial window is dropped); other codes for bad data.
  absl::StatusOr<std::vector<int32_t>> NextWindow();

  // The exact position in the stream: after LoadStateDict(StateDict()) the following windows
  // are identical. After the same number of NextWindow calls every rank holds the same state, and
  // it may be loaded under another dp_world_size: the next round then starts where it left off.
  nlohmann::json StateDict() const;
  // Its size does not grow with the documents: tokens read but not yet windowed are named by the
  // document they end (where it starts, how many of its tokens are windowed), which the next
  // NextWindow after LoadStateDict reads and tokenizes again. States of older titans, which list
  // those tokens under "tokens", load as well.
  // Checks the state against this dataset (seq_len, file list) and moves to it; no I/O until the
  // next NextWindow.
  absl::Status LoadStateDict(const nlohmann::json& state);

  int64_t seq_len() const { return options_.seq_len; }
  const std::string& path() const { return options_.path; }
  // Passes over the data begun before the current one (0 in the first).
  int64_t epoch() const { return epoch_; }
  // The data files, in reading order.
  const std::vector<std::string>& files() const { return files_; }

 private:
  PackedTextDataset(const TextDatasetOptions& options, const Tokenizer* tokenizer,
                    std::vector<std::string> files, std::vector<std::string> file_names,
                    std::string split);

  // Takes the next global window off the stream into `window`, or drops it when null.
  absl::Status TakeWindow(std::vector<int32_t>* window);
  // Appends the next document's tokens, moving on to the next file or epoch as needed.
  absl::Status ReadDocument();
  // Reads the document at document_start_ again and leaves its unwindowed tokens in tokens_.
  absl::Status RestoreDocument();
  std::vector<int32_t> Tokenize(const std::string& text) const;
  // After an older state that listed more than a window of tokens: finds where their document
  // starts by reading the file up to file_position_ once, so that the states saved while the
  // rest of it is windowed name it instead of listing its tokens again. Leaves it unknown when
  // the file does not match.
  void LocateDocument();
  // options_.path, naming the split read of a folder.
  std::string DataName() const;
  // Why a state's file `saved_file`, its #file_index, is not this dataset's #file_index.
  std::string DescribeMovedFile(const std::string& saved_file, int64_t file_index) const;
  // `status` saying that the file may have changed, while reading on from a loaded state.
  absl::Status ResumeHint(const absl::Status& status) const;

  const TextDatasetOptions options_;
  const Tokenizer* const tokenizer_;
  const std::vector<std::string> files_;
  const std::vector<std::string> file_names_;  // files_ relative to options_.path, for the state
  const std::string split_;  // the folder's split read, or "" (a file, or a folder read whole)

  // Position in the stream; see StateDict.
  int64_t epoch_ = 0;
  int64_t file_index_ = 0;  // == files_.size() once a finite dataset is exhausted
  DocumentPosition file_position_;
  std::unique_ptr<JsonDocumentReader> reader_;  // on files_[file_index_] at file_position_, or null
  // The saved byte offset LoadStateDict resumed at, until a document is read from there.
  std::optional<int64_t> resumed_at_;
  int64_t documents_in_epoch_ = 0;
  int64_t windows_consumed_ = 0;  // global windows, every rank's
  std::vector<int32_t> tokens_;   // tokens read but not yet windowed start at tokens_start_
  size_t tokens_start_ = 0;
  // Where the document that ends at file_position_ starts, and its token count; null when unknown
  // (at the start of a file, or after loading an older state that listed the tokens).
  std::optional<DocumentPosition> document_start_;
  int64_t document_tokens_ = 0;
  // Set by LoadStateDict until RestoreDocument: tokens_ is then empty, and that document's tokens
  // from this one on are the unwindowed ones.
  std::optional<int64_t> restore_from_token_;
  bool locate_document_ = false;  // LocateDocument at the next TakeWindow
};

}  // namespace titan

#endif  // TITAN_LIB_DATA_PACKED_TEXT_DATASET_H_
