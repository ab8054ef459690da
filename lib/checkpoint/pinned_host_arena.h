#ifndef TITAN_LIB_CHECKPOINT_PINNED_HOST_ARENA_H_
#define TITAN_LIB_CHECKPOINT_PINNED_HOST_ARENA_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"

namespace titan {

// Host memory for copies of a set of tensors, kept from one checkpoint save to the next: one
// allocation laid out for all of them, registered with CUDA as pinned when any of them is on a
// GPU (so copies from there can be queued without waiting). LibTorch's pinned allocator rounds
// each block up to a power of two, up to twice the bytes; one registered block costs the bytes in
// whole pages, as torch.distributed.checkpoint's pinned staging does.
class PinnedHostArena {
 public:
  PinnedHostArena() = default;
  PinnedHostArena(const PinnedHostArena&) = delete;
  PinnedHostArena& operator=(const PinnedHostArena&) = delete;
  ~PinnedHostArena();

  // Host tensors with the names, shapes and dtypes of `tensors`, in order: views of the arena,
  // which is laid out anew only when those change.
  absl::StatusOr<NamedTensors> Views(const NamedTensors& tensors);
  // Whether the arena is registered with CUDA as pinned memory.
  bool pinned() const { return registered_; }

 private:
  struct Slot {
    std::string name;
    std::vector<int64_t> sizes;
    at::ScalarType dtype;
    int64_t offset;  // in bytes
  };
  bool Matches(const NamedTensors& tensors) const;
  void Release();

  std::vector<Slot> slots_;
  at::Tensor bytes_;
  bool for_gpu_ = false;     // laid out for tensors some of which are on a GPU
  bool registered_ = false;  // and pinned for them
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_PINNED_HOST_ARENA_H_
