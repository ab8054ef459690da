#include "lib/model/module.h"

namespace titan {

at::Tensor& Module::RegisterParameter(const std::string& name, at::IntArrayRef shape,
                                      const at::TensorOptions& options) {
  params_.emplace_back(name, at::empty(shape, options));
  return params_.back().second;
}

const LinearFn& Module::RegisterLinear(const std::string& name, const at::Tensor& weight) {
  linears_.push_back({name, &weight, nullptr});
  return linears_.back().fn;
}

void Module::CollectLinears(const std::string& prefix, std::vector<LinearRef>& out) {
  for (LinearSlot& slot : linears_) out.push_back({prefix + slot.name, slot.weight, &slot.fn});
  for (auto& [name, child] : children_) child->CollectLinears(prefix + name + ".", out);
}

std::vector<LinearRef> Module::NamedLinears() {
  std::vector<LinearRef> out;
  CollectLinears("", out);
  return out;
}

void Module::CollectParameters(const std::string& prefix, std::vector<ParamRef>& out) {
  for (auto& [name, tensor] : params_) out.push_back({prefix + name, &tensor});
  for (auto& [name, child] : children_) child->CollectParameters(prefix + name + ".", out);
}

std::vector<ParamRef> Module::NamedParameters() {
  std::vector<ParamRef> out;
  CollectParameters("", out);
  return out;
}

int64_t Module::NumParameters() {
  int64_t total = 0;
  for (const ParamRef& p : NamedParameters()) total += p.tensor->numel();
  return total;
}

void Module::Materialize(const at::TensorOptions& options) {
  Materialize(NamedParameters(), options);
}

void Module::Materialize(const std::vector<ParamRef>& params, const at::TensorOptions& options) {
  for (const ParamRef& p : params) {
    *p.tensor = at::empty(p.tensor->sizes(), options).set_requires_grad(true);
  }
}

}  // namespace titan
