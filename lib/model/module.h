#ifndef TITAN_LIB_MODEL_MODULE_H_
#define TITAN_LIB_MODEL_MODULE_H_

#include <ATen/ATen.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace titan {

// A parameter slot: the model owns the tensor; parallelize code may swap it (for a shard, say).
struct ParamRef {
  std::string name;
  at::Tensor* tensor;
};

// How a linear layer computes x @ weightᵀ (weight in nn.Linear's [out, in] layout). Unset: the
// plain product; model converters (float8) set it per layer. `kept_output`, when defined, is the
// output op-level checkpointing kept from the forward: return it wired into autograd with this
// product's backward instead of computing it again.
using LinearFn = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& weight,
                                          const at::Tensor& kept_output)>;

// A linear layer: torchtitan's module name ("layers.0.attention.wq"), its weight slot and product.
struct LinearRef {
  std::string name;
  const at::Tensor* weight;
  LinearFn* fn;
};

// A tree of named parameters with stable addresses. Parameters are declared by shape and dtype and
// may live on the meta device until Materialize() gives them storage; then the model initialises them.
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Depth-first, in declaration order, with dotted names ("layers.0.attention.wq.weight").
  std::vector<ParamRef> NamedParameters();
  int64_t NumParameters();
  // The linear layers, in the same order and naming (without ".weight").
  std::vector<LinearRef> NamedLinears();

  // Replaces every meta (or other-device) parameter with uninitialised storage on `options`'
  // device and dtype, requiring grad. Call the model's weight init afterwards.
  void Materialize(const at::TensorOptions& options);
  // The same for some parameters only (e.g. one FSDP group at a time).
  static void Materialize(const std::vector<ParamRef>& params, const at::TensorOptions& options);

 protected:
  at::Tensor& RegisterParameter(const std::string& name, at::IntArrayRef shape,
                                const at::TensorOptions& options);
  // Declares `weight` (a registered parameter) the weight of linear layer `name`; returns the
  // layer's product for Forward to call (see Linear in op_cache.h).
  const LinearFn& RegisterLinear(const std::string& name, const at::Tensor& weight);
  template <typename M>
  M* RegisterModule(const std::string& name, std::unique_ptr<M> module) {
    M* raw = module.get();
    children_.emplace_back(name, std::move(module));
    return raw;
  }

 private:
  void CollectParameters(const std::string& prefix, std::vector<ParamRef>& out);
  void CollectLinears(const std::string& prefix, std::vector<LinearRef>& out);

  std::deque<std::pair<std::string, at::Tensor>> params_;  // deque: slots never move
  struct LinearSlot {
    std::string name;
    const at::Tensor* weight;
    LinearFn fn;
  };
  std::deque<LinearSlot> linears_;  // deque: products never move
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace titan

#endif  // TITAN_LIB_MODEL_MODULE_H_
