#ifndef TITAN_LIB_PIPELINE_SPLIT_BACKWARD_H_
#define TITAN_LIB_PIPELINE_SPLIT_BACKWARD_H_

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <unordered_set>
#include <vector>

namespace titan {

// One stage's backward in two halves, for zero-bubble schedules (PyTorch's stage_backward_input
// and stage_backward_weight): InputGrad() computes only the gradient of the stage's input (what
// the previous stage waits for) and records the gradients reaching the last graph nodes on the
// input's path before each weight (the matmuls, mostly); WeightGrads() later runs the rest of the
// graph from those nodes into the weights' .grad, with their edges back into the input's path cut
// (that part is done: gradients must not flow through it twice). Together they compute what one
// backward does, each node once. Weights of blocks that backward recomputes (activation checkpointing) get their
// gradients inside InputGrad(): their graph exists only during the recomputation.
class SplitBackward {
 public:
  // `output`'s graph must be alive and lead to `input` (a leaf requiring grad); `grad_output`
  // undefined: `output` is a scalar loss. `weights` are the stage's leaf parameters.
  SplitBackward(at::Tensor output, at::Tensor grad_output, at::Tensor input,
                std::vector<at::Tensor> weights);

  // The gradient of `input`; keeps the graph for WeightGrads.
  at::Tensor InputGrad();
  // Accumulates the weights' gradients and releases the graph; after InputGrad, once.
  void WeightGrads();

 private:
  // Finds the intermediates: the nodes on the input's path with an edge leaving it towards a
  // weight.
  void Plan();

  at::Tensor output_;
  at::Tensor grad_output_;
  at::Tensor input_;
  std::vector<at::Tensor> weights_;
  std::unordered_set<torch::autograd::Node*> input_path_;  // nodes that lead to the input
  std::vector<std::shared_ptr<torch::autograd::Node>> intermediates_;
  std::vector<torch::autograd::variable_list> grads_;  // each intermediate's, from InputGrad
  torch::autograd::edge_list weight_edges_;            // weights in this graph
};

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_SPLIT_BACKWARD_H_
