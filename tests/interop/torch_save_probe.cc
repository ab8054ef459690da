// torch_save_probe FILE OUT
// Reads a torch.save archive as titan's readers do and writes its tensors to OUT as safetensors,
// printing their names one a line in the order read. A refusal goes to stderr (exit 1).
// torch_save_test.py compares them with what torch.load reads.

#include <iostream>

#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/torch_state_dict.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: torch_save_probe FILE OUT\n";
    return 1;
  }
  const absl::StatusOr<titan::NamedTensors> tensors = titan::ReadTorchStateDictFile(argv[1]);
  absl::Status status = tensors.status();
  if (status.ok()) status = titan::WriteSafetensors(argv[2], *tensors);
  if (!status.ok()) {
    std::cerr << "torch_save_probe: " << status.message() << "\n";
    return 1;
  }
  for (const auto& [name, tensor] : *tensors) std::cout << name << "\n";
  return 0;
}
