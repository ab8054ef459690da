// Test helper: writes the scalars read from stdin ("<tag>\t<step>\t<value>" per line) into a
// TensorBoard event file under the folder given as the first argument; the optional second is
// the writer's purge_step.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "lib/metrics/tensorboard_writer.h"

int main(int argc, char** argv) {
  int64_t purge_step = -1;
  if ((argc != 2 && argc != 3) || (argc == 3 && !absl::SimpleAtoi(argv[2], &purge_step))) {
    std::cerr << "usage: " << argv[0] << " LOG_DIR [PURGE_STEP] < scalars.tsv\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<titan::TensorBoardWriter>> writer =
      titan::TensorBoardWriter::Create(argv[1], purge_step);
  if (!writer.ok()) {
    std::cerr << writer.status() << "\n";
    return 1;
  }
  std::string line;
  for (int line_number = 1; std::getline(std::cin, line); ++line_number) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    int64_t step = 0;
    float value = 0;
    if (fields.size() != 3 || !absl::SimpleAtoi(fields[1], &step) ||
        !absl::SimpleAtof(fields[2], &value)) {
      std::cerr << "stdin:" << line_number << ": expected <tag>\\t<step>\\t<value>, got \"" << line
                << "\"\n";
      return 1;
    }
    const absl::Status status = (*writer)->AddScalar(fields[0], value, step);
    if (!status.ok()) {
      std::cerr << status << "\n";
      return 1;
    }
  }
  const absl::Status status = (*writer)->Flush();
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  std::cout << (*writer)->path() << "\n";
  return 0;
}
