#include "lib/pipeline/stage.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>

#include <utility>

#include "lib/model/autocast.h"
#include "lib/profiling/phase_range.h"

namespace titan {
namespace {

// Backward from a stage's output: the next stage's gradient, or none for the (scaled) loss.
void RunBackward(const at::Tensor& output, const at::Tensor& grad_output) {
  if (grad_output.defined()) {
    torch::autograd::backward({output}, {grad_output});
  } else {
    output.backward();
  }
}

}  // namespace

PipelineStage::PipelineStage(int index, int num_stages, std::unique_ptr<Decoder> model,
                             std::unique_ptr<DataParallel> data_parallel)
    : index_(index),
      num_stages_(num_stages),
      model_(std::move(model)),
      data_parallel_(std::move(data_parallel)) {
  for (const ParamRef& p : model_->NamedParameters()) weights_.push_back(*p.tensor);
}

at::Tensor PipelineStage::Forward(int m, const Batch& batch, const at::Tensor& input,
                                  const StageRun& run) {
  at::Tensor out;
  {
    PhaseRange range("forward");
    AutocastScope autocast(batch.tokens.device().type(), run.autocast);
    DecoderInputs inputs;
    inputs.positions = batch.positions;
    inputs.documents = batch.documents;
    out = data_parallel_->Forward([&] {
      at::Tensor hidden = is_first() ? model_->Embed(batch.tokens) : input;
      const BatchContext context =
          model_->PrepareBatch(batch.tokens.size(0), batch.tokens.size(1), inputs);
      hidden = model_->RunLayers(hidden, context);
      return is_last() ? run.loss->Forward(*model_, hidden, batch) : hidden;
    });
  }
  if (is_last()) out = run.loss->Sum(out, batch);
  if (c10::GradMode::is_enabled()) {
    InFlight& state = in_flight_[m];
    state.input = input;
    state.output = is_last() ? out / run.loss_scale : out;
  }
  return out;
}

PipelineStage::InFlight PipelineStage::Take(int m) {
  auto it = in_flight_.find(m);
  TORCH_CHECK(it != in_flight_.end(), "pipeline stage ", index_, ": backward of microbatch ", m,
              " before its forward");
  InFlight state = std::move(it->second);
  in_flight_.erase(it);
  return state;
}

at::Tensor PipelineStage::Backward(int m, const at::Tensor& grad_output) {
  PhaseRange range("backward");
  InFlight state = Take(m);
  RunBackward(state.output, grad_output);
  return is_first() ? at::Tensor() : state.input.grad();
}

at::Tensor PipelineStage::BackwardInput(int m, const at::Tensor& grad_output) {
  PhaseRange range("backward");
  auto it = in_flight_.find(m);
  TORCH_CHECK(it != in_flight_.end(), "pipeline stage ", index_, ": backward of microbatch ", m,
              " before its forward");
  InFlight& state = it->second;
  state.grad_output = grad_output;
  if (is_first()) return at::Tensor();
  state.split =
      std::make_unique<SplitBackward>(state.output, grad_output, state.input, weights_);
  return state.split->InputGrad();
}

void PipelineStage::BackwardWeight(int m) {
  PhaseRange range("backward");
  InFlight state = Take(m);
  if (state.split != nullptr) {
    state.split->WeightGrads();
  } else {
    RunBackward(state.output, state.grad_output);
  }
}

}  // namespace titan
