#ifndef TITAN_LIB_PROFILING_MEMORY_TRACKER_H_
#define TITAN_LIB_PROFILING_MEMORY_TRACKER_H_

// Live tensor memory over time, by what it holds, for profile_run's memory timeline and peak.

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/profiling/tracking_allocator.h"

namespace titan {

enum class MemoryCategory : uint8_t {
  kParameters,      // the parameters as this rank holds them (FSDP: its shards)
  kGradients,       // what parameters' .grad hold when the optimizer starts
  kOptimizerState,  // the optimizer's state tensors after its step
  kActivations,     // other blocks allocated inside "forward" or "backward": saved activations,
                    // autograd temporaries, logits
  kCommunication,   // other blocks allocated inside a collective or FSDP gather/reduce range:
                    // FSDP's gathered (unsharded) parameters, reduce-scatter inputs, staging
  kOther,           // everything else: batches, clipping and optimizer temporaries, ...
};
inline constexpr int kNumMemoryCategories = 6;
// "parameters", "gradients", "optimizer_state", "activations", "communication", "other".
const char* MemoryCategoryName(MemoryCategory category);

using CategoryBytes = std::array<int64_t, kNumMemoryCategories>;

struct MemorySample {
  double time_ms = 0;  // since recording started
  CategoryBytes bytes{};
  int64_t total() const;
};

struct MemoryTimeline {
  // At the start, then after each allocation or free (thinned to the requested count, keeping
  // each interval's highest total), then at the end.
  std::vector<MemorySample> samples;
  MemorySample peak;                                    // the moment the total was highest
  CategoryBytes max_bytes{};                            // each category's own highest
  std::vector<std::pair<int64_t, double>> step_starts;  // step, time_ms
  int64_t events = 0;                                   // allocations and frees recorded
};

// Watches one device's allocator. A block's category is the last Tag() given to its storage while
// it lived, else where it was allocated: inside a range named "comm:..." or "fsdp::..."
// (communication), else inside "forward" or "backward" (activations), else other. Ranges are
// followed through a RecordFunction callback, process-wide: the trainer runs them on one thread,
// and on a GPU the autograd threads allocate for that thread's backward. Sizes are the bytes
// asked for, on CUDA too (the caching allocator's trace reports requested sizes, not its rounded
// blocks: the peak is below max_memory_allocated); allocator overhead and cached free blocks are
// not counted.
class MemoryTracker : public AllocationObserver {
 public:
  // On the CPU it installs TrackingAllocator (blocks allocated earlier stay unseen, so create it
  // before the model); on CUDA it attaches to the caching allocator's trace (not yet run: no GPU
  // where this was written). One tracker per process at a time.
  static absl::StatusOr<std::unique_ptr<MemoryTracker>> Create(const c10::Device& device);
  ~MemoryTracker() override;

  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // The block holding `tensor`'s storage (if this tracker saw it allocated) counts as `category`.
  void Tag(const at::Tensor& tensor, MemoryCategory category);

  // Records every allocation and free until StopRecording, which returns the timeline with at
  // most `max_samples` samples between the first and the last.
  void StartRecording();
  void MarkStep(int64_t step);
  MemoryTimeline StopRecording(size_t max_samples);

  // Live bytes by category now.
  CategoryBytes LiveBytes();

  void OnAllocate(const void* data, int64_t bytes) override;
  void OnFree(const void* data, int64_t bytes) override;

 private:
  struct Block {
    int64_t bytes = 0;
    MemoryCategory allocated_in = MemoryCategory::kOther;
    int8_t tag = -1;  // a MemoryCategory, or -1 when untagged
    MemoryCategory category() const {
      return tag >= 0 ? static_cast<MemoryCategory>(tag) : allocated_in;
    }
  };
  struct Event {
    int64_t time_ns;
    int32_t block;
    bool allocated;
  };

  explicit MemoryTracker(const c10::Device& device) : device_(device) {}
  int64_t NowNs() const;

  const c10::Device device_;
  at::CallbackHandle ranges_ = 0;
  std::mutex mutex_;
  std::vector<Block> blocks_;
  std::vector<int32_t> reusable_;  // freed blocks no recorded event refers to
  absl::flat_hash_map<const void*, int32_t> live_;
  bool recording_ = false;
  int64_t start_ns_ = 0;
  std::vector<int32_t> live_at_start_;
  std::vector<Event> events_;
  std::vector<std::pair<int64_t, int64_t>> steps_;  // step, time_ns
};

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_MEMORY_TRACKER_H_
