#ifndef TITAN_LIB_PIPELINE_STAGE_H_
#define TITAN_LIB_PIPELINE_STAGE_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "lib/model/decoder.h"
#include "lib/parallel/data_parallel.h"
#include "lib/pipeline/split_backward.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"

namespace titan {

// How a training schedule runs a stage's microbatches.
struct StageRun {
  const HeadLoss* loss = nullptr;
  // The last stage backpropagates loss / loss_scale (the trainer's global-valid-token count).
  double loss_scale = 1;
  std::optional<at::ScalarType> autocast;  // mixed precision of the forward (GPU)
};

// One pipeline stage on this rank: a decoder part (layers [first, end) with global ids, the
// embedding on the first stage, norm and head on the last) with its data-parallel wrapper, and what
// backward needs of each microbatch in flight.
class PipelineStage {
 public:
  PipelineStage(int index, int num_stages, std::unique_ptr<Decoder> model,
                std::unique_ptr<DataParallel> data_parallel);

  int index() const { return index_; }
  bool is_first() const { return index_ == 0; }
  bool is_last() const { return index_ + 1 == num_stages_; }
  Decoder& model() { return *model_; }
  DataParallel& data_parallel() { return *data_parallel_; }

  // F: the first stage embeds batch.tokens, the others continue from `input` (the previous
  // stage's output, a leaf requiring grad when training). Returns the hidden state for the next
  // stage or, on the last stage, the microbatch's loss sum. With grad mode on, keeps microbatch
  // `m`'s graph for backward.
  at::Tensor Forward(int m, const Batch& batch, const at::Tensor& input, const StageRun& run);
  // B: backward of microbatch `m` from the next stage's `grad_output` (the loss on the last
  // stage); returns the input's gradient (undefined on the first stage).
  at::Tensor Backward(int m, const at::Tensor& grad_output);
  // I: the input's gradient only; the weight gradients wait for BackwardWeight. The first stage
  // has no input gradient to compute and leaves its whole backward to W.
  at::Tensor BackwardInput(int m, const at::Tensor& grad_output);
  // W: the weight gradients after BackwardInput.
  void BackwardWeight(int m);

 private:
  struct InFlight {
    at::Tensor input;
    at::Tensor output;       // the scaled loss on the last stage
    at::Tensor grad_output;  // kept from I for W
    std::unique_ptr<SplitBackward> split;
  };
  InFlight Take(int m);

  int index_;
  int num_stages_;
  std::unique_ptr<Decoder> model_;
  std::unique_ptr<DataParallel> data_parallel_;
  std::vector<at::Tensor> weights_;  // leaves (FSDP: shards)
  std::map<int, InFlight> in_flight_;
};

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_STAGE_H_
