#include "lib/data/text_data_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace titan {

TextDataLoader::TextDataLoader(std::unique_ptr<PackedTextDataset> dataset)
    : dataset_(std::move(dataset)) {}

absl::StatusOr<TokenBatch> TextDataLoader::NextBatch(int64_t local_batch_size) {
  if (local_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: local batch size must be at least 1, got ", local_batch_size));
  }
  const int64_t seq_len = dataset_->seq_len();
  TokenBatch batch;
  batch.seq_len = seq_len;
  batch.inputs.reserve(local_batch_size * seq_len);
  batch.labels.reserve(local_batch_size * seq_len);
  for (; batch.batch_size < local_batch_size; ++batch.batch_size) {
    absl::StatusOr<std::vector<int32_t>> window = dataset_->NextWindow();
    if (absl::IsOutOfRange(window.status()) && batch.batch_size > 0) break;
    if (!window.ok()) return window.status();
    batch.inputs.insert(batch.inputs.end(), window->begin(), window->end() - 1);
    batch.labels.insert(batch.labels.end(), window->begin() + 1, window->end());
  }
  return batch;
}

nlohmann::json TextDataLoader::StateDict() const { return dataset_->StateDict(); }

absl::Status TextDataLoader::LoadStateDict(const nlohmann::json& state) {
  return dataset_->LoadStateDict(state);
}

}  // namespace titan
