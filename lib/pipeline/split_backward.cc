#include "lib/pipeline/split_backward.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace titan {
namespace {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Keeps a copy of the gradients flowing into a node.
class CaptureGrads : public torch::autograd::FunctionPreHook {
 public:
  explicit CaptureGrads(variable_list* into) : into_(into) {}
  variable_list operator()(const variable_list& grads) override {
    *into_ = grads;
    return grads;
  }

 private:
  variable_list* into_;
};

// The graph below `root`: each node with the nodes pointing at it, and its owning reference.
struct ReverseGraph {
  std::unordered_map<Node*, std::vector<Node*>> parents;
  std::unordered_map<Node*, std::shared_ptr<Node>> owners;
};

ReverseGraph Reverse(const std::shared_ptr<Node>& root) {
  ReverseGraph graph;
  graph.parents[root.get()];
  graph.owners[root.get()] = root;
  std::vector<Node*> stack = {root.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      Node* child = edge.function.get();
      if (child == nullptr) continue;
      const bool seen = graph.owners.count(child) > 0;
      graph.parents[child].push_back(node);
      if (!seen) {
        graph.owners[child] = edge.function;
        stack.push_back(child);
      }
    }
  }
  return graph;
}

// Nodes reachable upwards (towards the output) from `start`; a node in `stop` is collected in
// `hit` and not passed.
std::unordered_set<Node*> UpwardClosure(Node* start,
                                        const std::unordered_map<Node*, std::vector<Node*>>& parents,
                                        const std::unordered_set<Node*>* stop,
                                        std::vector<Node*>* hit) {
  std::unordered_set<Node*> seen = {start};
  std::deque<Node*> queue = {start};
  while (!queue.empty()) {
    Node* node = queue.front();
    queue.pop_front();
    for (Node* parent : parents.at(node)) {
      if (!seen.insert(parent).second) continue;
      if (stop != nullptr && stop->count(parent) > 0) {
        hit->push_back(parent);
      } else {
        queue.push_back(parent);
      }
    }
  }
  return seen;
}

}  // namespace

SplitBackward::SplitBackward(at::Tensor output, at::Tensor grad_output, at::Tensor input,
                             std::vector<at::Tensor> weights)
    : output_(std::move(output)),
      grad_output_(std::move(grad_output)),
      input_(std::move(input)),
      weights_(std::move(weights)) {}

void SplitBackward::Plan() {
  const std::shared_ptr<Node> root = output_.grad_fn();
  TORCH_CHECK(root != nullptr, "split backward: the stage output has no graph");
  const ReverseGraph graph = Reverse(root);
  const std::shared_ptr<Node> input_node = torch::autograd::impl::try_get_grad_accumulator(input_);
  TORCH_CHECK(input_node != nullptr && graph.parents.count(input_node.get()) > 0,
              "split backward: the stage output does not depend on its input");
  input_path_ = UpwardClosure(input_node.get(), graph.parents, nullptr, nullptr);
  std::unordered_set<Node*> placed;
  for (const at::Tensor& weight : weights_) {
    const std::shared_ptr<Node> acc = torch::autograd::impl::try_get_grad_accumulator(weight);
    // Not in this graph: a weight used only inside a recomputed block, or not at all.
    if (acc == nullptr || graph.parents.count(acc.get()) == 0) continue;
    weight_edges_.push_back(torch::autograd::impl::gradient_edge(weight));
    std::vector<Node*> hits;
    UpwardClosure(acc.get(), graph.parents, &input_path_, &hits);
    TORCH_CHECK(!hits.empty(), "split backward: a weight's gradient does not meet the input's");
    for (Node* node : hits) {
      if (placed.insert(node).second) intermediates_.push_back(graph.owners.at(node));
    }
  }
  grads_.resize(intermediates_.size());
}

at::Tensor SplitBackward::InputGrad() {
  Plan();
  std::vector<torch::autograd::FunctionPreHook*> hooks;
  for (size_t j = 0; j < intermediates_.size(); ++j) {
    auto hook = std::make_unique<CaptureGrads>(&grads_[j]);
    hooks.push_back(hook.get());
    intermediates_[j]->add_pre_hook(std::move(hook));
  }
  variable_list grad_outputs;
  if (grad_output_.defined()) grad_outputs.push_back(grad_output_);
  const variable_list grads =
      torch::autograd::grad({output_}, {input_}, grad_outputs, /*retain_graph=*/true);
  for (size_t j = 0; j < intermediates_.size(); ++j) {
    auto& list = intermediates_[j]->pre_hooks();
    list.erase(std::find_if(list.begin(), list.end(),
                            [hook = hooks[j]](const auto& h) { return h.get() == hook; }));
  }
  return grads[0];
}

void SplitBackward::WeightGrads() {
  torch::autograd::edge_list roots;
  variable_list grads;
  for (size_t j = 0; j < intermediates_.size(); ++j) {
    // Cut (the graph is not used again): FSDP gathers a block's weights in one node, so a path
    // from one intermediate back through the input's path would reach that block's weights again.
    for (Edge& edge : intermediates_[j]->next_edges()) {
      if (input_path_.count(edge.function.get()) > 0) edge = Edge();
    }
    for (size_t k = 0; k < grads_[j].size(); ++k) {
      if (!grads_[j][k].defined()) continue;
      roots.emplace_back(intermediates_[j], static_cast<uint32_t>(k));
      grads.push_back(grads_[j][k]);
    }
  }
  if (!roots.empty()) {
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false,
                                                          /*create_graph=*/false,
                                                          /*accumulate_grad=*/true, weight_edges_);
  }
  intermediates_.clear();
  grads_.clear();
  input_path_.clear();
  output_ = at::Tensor();
  grad_output_ = at::Tensor();
  input_ = at::Tensor();
}

}  // namespace titan
