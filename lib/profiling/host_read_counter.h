#ifndef TITAN_LIB_PROFILING_HOST_READ_COUNTER_H_
#define TITAN_LIB_PROFILING_HOST_READ_COUNTER_H_

// Tests of GPU-speed properties that a CPU run can check: how often a piece of training code
// reads a tensor's values on the host, which on a GPU waits for the device to drain.

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <vector>

#include "absl/container/flat_hash_set.h"

namespace titan {

// While alive, counts on this thread the ops that read tensor values on the host: item(), bool(t)
// and int(t) (all _local_scalar_dense), and the ops that size their output by the data (nonzero,
// masked_select, unique, bincount) or compare on the host (equal). Not seen: copies to the host,
// ops on other threads. One counter at a time on a thread.
class HostReadCounter {
 public:
  // Scalar reads of the tensors in `expected` (the same TensorImpl) are counted apart.
  explicit HostReadCounter(const std::vector<at::Tensor>& expected = {});
  ~HostReadCounter();
  HostReadCounter(const HostReadCounter&) = delete;
  HostReadCounter& operator=(const HostReadCounter&) = delete;

  int reads() const { return reads_; }                    // all but the expected ones
  int expected_reads() const { return expected_reads_; }  // of the `expected` tensors

 private:
  static std::unique_ptr<at::ObserverContext> Count(const at::RecordFunction& fn);

  absl::flat_hash_set<const void*> expected_;
  int reads_ = 0;
  int expected_reads_ = 0;
  at::CallbackHandle handle_;
};

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_HOST_READ_COUNTER_H_
