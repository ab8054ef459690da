#include "lib/train/optimizer.h"

#include <torch/optim/adamw.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace titan {
namespace {

bool DecaysWeight(const ParamRef& p) {
  return p.tensor->dim() >= 2 && !absl::StrContains(p.name, "tok_embeddings");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const std::vector<ParamRef>& params,
                                                             const OptimizerOptions& options) {
  if (options.name != "AdamW") {
    return absl::InvalidArgumentError(
        absl::StrCat("[optimizer] name: expected \"AdamW\", got \"", options.name, "\""));
  }
  return std::unique_ptr<Optimizer>(new Optimizer(params, options));
}

Optimizer::Optimizer(std::vector<ParamRef> params, const OptimizerOptions& options)
    : params_(std::move(params)), options_(options) {
  std::vector<at::Tensor> decay, no_decay;
  for (const ParamRef& p : params_) (DecaysWeight(p) ? decay : no_decay).push_back(*p.tensor);
  auto group_options = [&](double weight_decay) {
    auto o = std::make_unique<torch::optim::AdamWOptions>(options.lr);
    o->betas({options.beta1, options.beta2}).eps(options.eps).weight_decay(weight_decay);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, group_options(options.weight_decay));
  groups.emplace_back(no_decay, group_options(0.0));
  adamw_ = std::make_unique<torch::optim::AdamW>(std::move(groups),
                                                 *group_options(options.weight_decay));
}

Optimizer::~Optimizer() = default;

void Optimizer::ZeroGrad() { adamw_->zero_grad(/*set_to_none=*/true); }

void Optimizer::Step() { adamw_->step(); }

void Optimizer::SetLrFactor(double factor) {
  for (auto& group : adamw_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(options_.lr * factor);
  }
}

double Optimizer::lr() const {
  return static_cast<const torch::optim::AdamWOptions&>(adamw_->param_groups()[0].options()).lr();
}

void Optimizer::InitState() {
  auto& state = adamw_->state();
  for (const ParamRef& p : params_) {
    auto& slot = state[p.tensor->unsafeGetTensorImpl()];
    if (slot != nullptr) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(0);
    s->exp_avg(at::zeros_like(*p.tensor, at::MemoryFormat::Preserve));
    s->exp_avg_sq(at::zeros_like(*p.tensor, at::MemoryFormat::Preserve));
    slot = std::move(s);
  }
}

NamedTensors Optimizer::StateDict() const {
  NamedTensors out;
  const auto& state = adamw_->state();
  for (const ParamRef& p : params_) {
    auto it = state.find(p.tensor->unsafeGetTensorImpl());
    if (it == state.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.emplace_back(p.name + ".exp_avg", s.exp_avg());
    out.emplace_back(p.name + ".exp_avg_sq", s.exp_avg_sq());
    out.emplace_back(p.name + ".step", at::scalar_tensor(s.step(), at::kLong));
  }
  return out;
}

absl::Status Optimizer::LoadStateDict(const NamedTensors& state) {
  absl::flat_hash_map<std::string, at::Tensor> by_name(state.begin(), state.end());
  auto& optimizer_state = adamw_->state();
  for (const ParamRef& p : params_) {
    auto avg = by_name.find(p.name + ".exp_avg");
    auto avg_sq = by_name.find(p.name + ".exp_avg_sq");
    auto step = by_name.find(p.name + ".step");
    if (avg == by_name.end() || avg_sq == by_name.end() || step == by_name.end()) {
      return absl::NotFoundError(absl::StrCat("optimizer state: no entry for parameter ", p.name));
    }
    if (!avg->second.sizes().equals(p.tensor->sizes()) ||
        !avg_sq->second.sizes().equals(p.tensor->sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state: ", p.name, ": shape ",
                                                     c10::str(avg->second.sizes()), " expected ",
                                                     c10::str(p.tensor->sizes())));
    }
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(step->second.item<int64_t>());
    s->exp_avg(avg->second.to(p.tensor->options()).clone());
    s->exp_avg_sq(avg_sq->second.to(p.tensor->options()).clone());
    optimizer_state[p.tensor->unsafeGetTensorImpl()] = std::move(s);
    by_name.erase(avg);
    by_name.erase(avg_sq);
    by_name.erase(step);
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state: unexpected entry ", by_name.begin()->first));
  }
  return absl::OkStatus();
}

}  // namespace titan
