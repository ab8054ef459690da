// Prints the files titan reads of a dataset folder for a split, one a line, or "refused".
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/data/packed_text_dataset.h"
#include "lib/data/test_util.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: list_split_main FOLDER SPLIT\n";
    return 2;
  }
  titan::TextDatasetOptions options;
  options.path = argv[1];
  options.split = argv[2];
  options.seq_len = 1;
  titan::ByteTokenizer tokenizer;
  absl::StatusOr<std::unique_ptr<titan::PackedTextDataset>> dataset =
      titan::PackedTextDataset::Open(options, &tokenizer);
  if (!dataset.ok()) {
    std::cout << "refused\n";
    std::cerr << dataset.status() << "\n";
    return 0;
  }
  for (const std::string& file : (*dataset)->files()) std::cout << file << "\n";
  return 0;
}
