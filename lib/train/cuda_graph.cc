#include "lib/train/cuda_graph.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <glog/logging.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// The batch tensors a graph reads, in a fixed order; undefined ones stay undefined.
std::vector<at::Tensor> GraphInputs(const Batch& batch) {
  return {batch.tokens, batch.labels, batch.positions};
}

}  // namespace

CudaGraphedMicrobatch::CudaGraphedMicrobatch(std::vector<ParamRef> params, int64_t eager_steps)
    : params_(std::move(params)), eager_steps_(eager_steps) {}

CudaGraphedMicrobatch::~CudaGraphedMicrobatch() = default;

absl::StatusOr<at::Tensor> CudaGraphedMicrobatch::Run(bool first_of_step, const Batch& batch,
                                                      double loss_divisor, const Body& body) {
  if (batch.documents.defined() || !batch.extra.empty()) {
    return absl::UnimplementedError(
        "[compile] cuda_graph: document masks and per-token loss inputs are not captured");
  }
  if (graph_ == nullptr) {
    if (first_of_step) ++steps_seen_;
    if (steps_seen_ <= eager_steps_ || !first_of_step) return body(batch);
    loss_divisor_ = loss_divisor;
    TITAN_RETURN_IF_ERROR(Capture(batch, body));
  } else {
    if (loss_divisor != loss_divisor_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "[compile] cuda_graph: the step's loss divisor changed from ", loss_divisor_, " to ",
          loss_divisor, " (counted tokens vary); the captured graph holds it as a constant"));
    }
    TITAN_RETURN_IF_ERROR(CopyInputs(batch));
  }
  graph_->replay();
  return output_.clone();  // the next replay overwrites the captured output
}

absl::Status CudaGraphedMicrobatch::CopyInputs(const Batch& batch) {
  const std::vector<at::Tensor> captured = GraphInputs(inputs_);
  const std::vector<at::Tensor> given = GraphInputs(batch);
  for (size_t i = 0; i < captured.size(); ++i) {
    if (captured[i].defined() != given[i].defined() ||
        (given[i].defined() && captured[i].sizes() != given[i].sizes())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "[compile] cuda_graph: a batch's shapes differ from the captured ones (",
          given[i].defined() ? c10::str(given[i].sizes()) : "none", " vs ",
          captured[i].defined() ? c10::str(captured[i].sizes()) : "none",
          "); CUDA graphs need static shapes"));
    }
    if (given[i].defined()) captured[i].copy_(given[i], /*non_blocking=*/true);
  }
  return absl::OkStatus();
}

void CudaGraphedMicrobatch::ZeroGrads() {
  for (const ParamRef& param : params_) {
    if (param.tensor->grad().defined()) param.tensor->mutable_grad().zero_();
  }
}

absl::Status CudaGraphedMicrobatch::Capture(const Batch& batch, const Body& body) {
  for (const at::Tensor& given : GraphInputs(batch)) {
    if (given.defined() && !given.is_cuda()) {
      return absl::FailedPreconditionError("[compile] cuda_graph needs the batch on a CUDA device");
    }
  }
  inputs_.tokens = batch.tokens.clone();
  inputs_.labels = batch.labels.clone();
  if (batch.positions.defined()) inputs_.positions = batch.positions.clone();
  const at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream capture_stream = at::cuda::getStreamFromPool();
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(current);
  inputs_ready.block(capture_stream);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  bool capturing = false;
  try {
    c10::cuda::CUDAStreamGuard guard(capture_stream);
    // Warm-up on the capture stream (lazy per-stream state: cuBLAS workspaces, autograd's
    // streams); its gradients are dropped, so the step's gradients stay those of its batches.
    body(inputs_);
    ZeroGrads();
    capture_stream.synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();  // as torch.cuda.graph: a compact private pool
    // Thread-local: the resource monitor's thread may query the device while this one captures.
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    capturing = true;
    output_ = body(inputs_);
    graph->capture_end();
    capturing = false;
  } catch (const c10::Error& e) {
    if (capturing) {
      // Ends the stream's broken capture, so that the error below is what the run reports and
      // not the next CUDA call's. On the capture stream (the try block's guard is gone), which
      // capture_end checks; it then reports the invalidated capture, as expected.
      c10::cuda::CUDAStreamGuard end_guard(capture_stream);
      try {
        graph->capture_end();
      } catch (const c10::Error&) {
      }
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "[compile] cuda_graph: capturing forward and backward failed (an op synchronises with "
        "the host or cannot be captured); set cuda_graph = false. ",
        e.what_without_backtrace()));
  }
  at::cuda::CUDAEvent captured;
  captured.record(capture_stream);
  captured.block(current);
  graph_ = std::move(graph);
  LOG(INFO) << "[compile] cuda_graph: forward + backward captured at the step's first microbatch "
               "after "
            << eager_steps_ << " eager step(s); replayed from now on";
  return absl::OkStatus();
}

}  // namespace titan
