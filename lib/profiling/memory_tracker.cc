#include "lib/profiling/memory_tracker.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace titan {
namespace {

// How deep the running thread(s) are in communication and in forward/backward ranges.
std::atomic<int> g_comm_depth{0};
std::atomic<int> g_compute_depth{0};
std::atomic<bool> g_tracker_exists{false};

struct RangeContext : public at::ObserverContext {
  explicit RangeContext(std::atomic<int>* depth) : depth(depth) {}
  std::atomic<int>* depth;
};

std::unique_ptr<at::ObserverContext> OnRangeStart(const at::RecordFunction& fn) {
  const char* name = fn.name();
  std::atomic<int>* depth = nullptr;
  if (std::strncmp(name, "comm:", 5) == 0 || std::strncmp(name, "fsdp::", 6) == 0) {
    depth = &g_comm_depth;
  } else if (std::strcmp(name, "forward") == 0 || std::strcmp(name, "backward") == 0) {
    depth = &g_compute_depth;
  } else {
    return nullptr;
  }
  ++*depth;
  return std::make_unique<RangeContext>(depth);
}

void OnRangeEnd(const at::RecordFunction& /*fn*/, at::ObserverContext* context) {
  if (context != nullptr) --*static_cast<RangeContext*>(context)->depth;
}

MemoryCategory CategoryNow() {
  if (g_comm_depth.load(std::memory_order_relaxed) > 0) return MemoryCategory::kCommunication;
  if (g_compute_depth.load(std::memory_order_relaxed) > 0) return MemoryCategory::kActivations;
  return MemoryCategory::kOther;
}

// The CUDA caching allocator has no way to detach a trace tracker: it reaches the tracker through
// this slot, emptied when the tracker goes.
std::atomic<MemoryTracker*> g_cuda_tracker{nullptr};

void AttachToCudaAllocator() {
  static const bool attached = [] {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
        [](const c10::CachingDeviceAllocator::TraceEntry& entry) {
          MemoryTracker* tracker = g_cuda_tracker.load();
          if (tracker == nullptr) return;
          const auto* address = reinterpret_cast<const void*>(entry.addr_);
          if (entry.action_ == c10::CachingDeviceAllocator::TraceEntry::ALLOC) {
            tracker->OnAllocate(address, static_cast<int64_t>(entry.size_));
          } else if (entry.action_ == c10::CachingDeviceAllocator::TraceEntry::FREE_COMPLETED) {
            tracker->OnFree(address, static_cast<int64_t>(entry.size_));
          }
        });
    return true;
  }();
  (void)attached;
}

void Add(CategoryBytes& bytes, MemoryCategory category, int64_t delta) {
  bytes[static_cast<int>(category)] += delta;
}

}  // namespace

const char* MemoryCategoryName(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kCommunication:
      return "communication";
    case MemoryCategory::kOther:
      return "other";
  }
  return "other";
}

int64_t MemorySample::total() const {
  int64_t sum = 0;
  for (int64_t b : bytes) sum += b;
  return sum;
}

absl::StatusOr<std::unique_ptr<MemoryTracker>> MemoryTracker::Create(const c10::Device& device) {
  if (!device.is_cpu() && !device.is_cuda()) {
    return absl::UnimplementedError(
        absl::StrCat("memory tracking on ", device.str(), ": only CPU and CUDA are supported"));
  }
  if (g_tracker_exists.exchange(true)) {
    return absl::FailedPreconditionError("a MemoryTracker already exists in this process");
  }
  std::unique_ptr<MemoryTracker> tracker(new MemoryTracker(device));
  tracker->ranges_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&OnRangeStart, &OnRangeEnd).scopes({at::RecordScope::USER_SCOPE}));
  if (device.is_cpu()) {
    TrackingAllocator::Install().SetObserver(tracker.get());
  } else {
    try {
      AttachToCudaAllocator();
    } catch (const c10::Error& e) {
      at::removeCallback(tracker->ranges_);
      g_tracker_exists = false;
      return absl::InternalError(
          absl::StrCat("cannot follow the CUDA caching allocator: ", e.what_without_backtrace()));
    }
    g_cuda_tracker = tracker.get();
  }
  return tracker;
}

MemoryTracker::~MemoryTracker() {
  if (device_.is_cpu()) {
    TrackingAllocator::Install().SetObserver(nullptr);
  } else {
    g_cuda_tracker = nullptr;
  }
  at::removeCallback(ranges_);
  g_comm_depth = 0;
  g_compute_depth = 0;
  g_tracker_exists = false;
}

int64_t MemoryTracker::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void MemoryTracker::OnAllocate(const void* data, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  int32_t index;
  if (!reusable_.empty()) {
    index = reusable_.back();
    reusable_.pop_back();
  } else {
    index = static_cast<int32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  blocks_[index] = Block{bytes, CategoryNow(), -1};
  live_[data] = index;
  if (recording_) events_.push_back(Event{NowNs(), index, true});
}

void MemoryTracker::OnFree(const void* data, int64_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(data);
  if (it == live_.end()) return;  // allocated before the tracker
  const int32_t index = it->second;
  live_.erase(it);
  if (recording_) {
    events_.push_back(Event{NowNs(), index, false});
  } else {
    reusable_.push_back(index);
  }
}

void MemoryTracker::Tag(const at::Tensor& tensor, MemoryCategory category) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const void* data = tensor.storage().data();
  if (data == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(data);
  if (it != live_.end()) blocks_[it->second].tag = static_cast<int8_t>(category);
}

void MemoryTracker::StartRecording() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = true;
  start_ns_ = NowNs();
  live_at_start_.clear();
  for (const auto& [data, index] : live_) live_at_start_.push_back(index);
  events_.clear();
  steps_.clear();
}

void MemoryTracker::MarkStep(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.emplace_back(step, NowNs());
}

MemoryTimeline MemoryTracker::StopRecording(size_t max_samples) {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = false;
  const int64_t end_ns = NowNs();
  MemoryTimeline timeline;
  timeline.events = static_cast<int64_t>(events_.size());
  for (const auto& [step, ns] : steps_)
    timeline.step_starts.emplace_back(step, (ns - start_ns_) / 1e6);

  MemorySample now;
  for (int32_t index : live_at_start_)
    Add(now.bytes, blocks_[index].category(), blocks_[index].bytes);
  timeline.peak = now;
  timeline.max_bytes = now.bytes;
  timeline.samples.push_back(now);
  // Thinning: one sample per time bucket, the one with the highest total.
  const double bucket_ms =
      std::max(1e-6, (end_ns - start_ns_) / 1e6 / std::max<size_t>(1, max_samples));
  std::optional<MemorySample> bucket_best;
  int64_t bucket = -1;
  for (const Event& event : events_) {
    const Block& block = blocks_[event.block];
    Add(now.bytes, block.category(), event.allocated ? block.bytes : -block.bytes);
    now.time_ms = (event.time_ns - start_ns_) / 1e6;
    const int64_t total = now.total();
    if (total > timeline.peak.total()) timeline.peak = now;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      timeline.max_bytes[c] = std::max(timeline.max_bytes[c], now.bytes[c]);
    }
    const auto this_bucket = static_cast<int64_t>(now.time_ms / bucket_ms);
    if (this_bucket != bucket && bucket_best) {
      timeline.samples.push_back(*bucket_best);
      bucket_best.reset();
    }
    bucket = this_bucket;
    if (!bucket_best || total > bucket_best->total()) bucket_best = now;
  }
  if (bucket_best) timeline.samples.push_back(*bucket_best);
  now.time_ms = (end_ns - start_ns_) / 1e6;
  timeline.samples.push_back(now);
  // Blocks freed while recording can be reused now that no event refers to them.
  for (const Event& event : events_) {
    if (!event.allocated) reusable_.push_back(event.block);
  }
  events_.clear();
  events_.shrink_to_fit();
  live_at_start_.clear();
  return timeline;
}

CategoryBytes MemoryTracker::LiveBytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  CategoryBytes bytes{};
  for (const auto& [data, index] : live_)
    Add(bytes, blocks_[index].category(), blocks_[index].bytes);
  return bytes;
}

}  // namespace titan
