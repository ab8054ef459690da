#include "lib/checkpoint/pinned_host_arena.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace titan {
namespace {

constexpr int64_t kAlignment = 64;  // bytes: every dtype's, and a cache line

}  // namespace

PinnedHostArena::~PinnedHostArena() { Release(); }

bool PinnedHostArena::Matches(const NamedTensors& tensors) const {
  if (!bytes_.defined() || tensors.size() != slots_.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& tensor = tensors[i].second;
    if (tensors[i].first != slots_[i].name || tensor.scalar_type() != slots_[i].dtype ||
        !tensor.sizes().equals(slots_[i].sizes)) {
      return false;
    }
  }
  // A GPU tensor needs an arena laid out to be pinned (a failed pin is not retried every save).
  return for_gpu_ || std::none_of(tensors.begin(), tensors.end(),
                                  [](const auto& named) { return named.second.is_cuda(); });
}

void PinnedHostArena::Release() {
  if (registered_) cudaHostUnregister(bytes_.data_ptr());
  registered_ = false;
  for_gpu_ = false;
  bytes_ = at::Tensor();
  slots_.clear();
}

absl::StatusOr<NamedTensors> PinnedHostArena::Views(const NamedTensors& tensors) {
  if (!Matches(tensors)) {
    Release();
    int64_t total = 0;
    for (const auto& [name, tensor] : tensors) {
      slots_.push_back({name, tensor.sizes().vec(), tensor.scalar_type(), total});
      total += (tensor.numel() * tensor.element_size() + kAlignment - 1) / kAlignment * kAlignment;
      for_gpu_ = for_gpu_ || tensor.is_cuda();
    }
    try {
      // Whole pages: a registration shares no page with other memory (CUDA refuses a page
      // registered twice).
      const int64_t page = ::sysconf(_SC_PAGESIZE);
      const int64_t size = (std::max<int64_t>(total, 1) + page - 1) / page * page;
      const at::Tensor block = at::empty({size + page}, at::kByte);
      const int64_t misalignment = reinterpret_cast<uintptr_t>(block.data_ptr()) % page;
      bytes_ = block.narrow(0, misalignment == 0 ? 0 : page - misalignment, size);
    } catch (const c10::Error& e) {
      Release();
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", total,
                       " bytes of host memory for checkpoints: ", e.what_without_backtrace()));
    }
    if (for_gpu_) {
      const cudaError_t error =
          cudaHostRegister(bytes_.data_ptr(), bytes_.numel(), cudaHostRegisterPortable);
      registered_ = error == cudaSuccess;
      if (!registered_) {
        cudaGetLastError();  // clears it for the next CUDA call
        LOG(WARNING) << "could not pin " << total << " bytes of host memory for checkpoints ("
                     << cudaGetErrorString(error) << "): each save's copy will wait for the GPU";
      }
    }
  }
  NamedTensors views;
  views.reserve(slots_.size());
  for (const Slot& slot : slots_) {
    const int64_t bytes = c10::multiply_integers(slot.sizes) * c10::elementSize(slot.dtype);
    views.emplace_back(slot.name,
                       bytes_.narrow(0, slot.offset, bytes).view(slot.dtype).view(slot.sizes));
  }
  return views;
}

}  // namespace titan
