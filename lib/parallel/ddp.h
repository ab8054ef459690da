#ifndef TITAN_LIB_PARALLEL_DDP_H_
#define TITAN_LIB_PARALLEL_DDP_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"

namespace titan {

// DDP's gradient averaging over replicas: parameters are grouped into buckets (reverse order, about
// `bucket_cap_bytes` each, as PyTorch DDP: gradients become ready roughly back to front), and each
// bucket's all-reduce starts asynchronously as soon as its last gradient has been accumulated
// during backward, in bucket order on every rank. Finish() waits and writes sum / size (Gloo has no
// AVG).
class DdpGradientReducer {
 public:
  static constexpr int64_t kDefaultBucketCapBytes = 25 << 20;

  // `params` are leaf tensors of one dtype; `comm` is the replica group; both must outlive this.
  static absl::StatusOr<std::unique_ptr<DdpGradientReducer>> Create(
      std::vector<at::Tensor> params, Communicator* comm,
      int64_t bucket_cap_bytes = kDefaultBucketCapBytes);
  ~DdpGradientReducer();

  // Whether the coming backward passes communicate: only the last microbatch of a step does.
  void set_sync(bool sync) { sync_ = sync; }
  // After the synchronising backward: starts any bucket still pending (a parameter without a
  // gradient counts as zeros), waits for all, and leaves every gradient averaged over the group.
  absl::Status Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<int> params;  // indices into params_
    int pending = 0;          // gradients not yet accumulated in this backward
    at::Tensor buffer;        // the bucket's gradients, flat
    std::unique_ptr<Work> work;
  };
  class ReadyHook;

  DdpGradientReducer(std::vector<at::Tensor> params, Communicator* comm)
      : params_(std::move(params)), comm_(comm) {}

  void MarkReady(int param);
  void Launch(Bucket& bucket);

  std::vector<at::Tensor> params_;
  Communicator* comm_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // param index -> bucket index
  int next_launch_ = 0;
  bool sync_ = true;
  absl::Status error_;  // the first failed launch, reported by Finish
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_DDP_H_
