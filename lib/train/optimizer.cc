#include "lib/train/optimizer.h"

#include <ATen/Dispatch.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/config/adam_scalars.h"
#include "lib/config/field_value.h"
#include "lib/kernels/adam.h"
#include "lib/model/bf16_weight_copies.h"
#include "lib/train/grad_clip.h"
#include "lib/util/pcre2_code.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// The tensors one update call takes, aligned by index.
struct StepTensors {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> grads;
  std::vector<at::Tensor> exp_avgs;
  std::vector<at::Tensor> exp_avg_sqs;
  std::vector<at::Tensor> steps;

  void Add(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
           const at::Tensor& exp_avg_sq, const at::Tensor& step) {
    params.push_back(param);
    grads.push_back(grad);
    exp_avgs.push_back(exp_avg);
    exp_avg_sqs.push_back(exp_avg_sq);
    steps.push_back(step);
  }
};

// Which names a pattern is found in, as Python's re.search (unanchored). A name whose matching
// fails (PCRE2's backtracking limit) sets `match_error`: it depends on the names, so under
// pipeline parallelism it may happen on one stage only.
struct NameSearch {
  std::vector<bool> found;
  absl::Status match_error;
};

// A pattern that does not compile is an error of the config alone, alike on every rank.
absl::StatusOr<NameSearch> SearchNames(const std::string& pattern,
                                       const std::vector<ParamRef>& params,
                                       const std::string& key) {
  absl::StatusOr<Pcre2Code> code = CompilePcre2(pattern);
  if (!code.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, "=\"", pattern, "\": ", code.status().message()));
  }
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code->get(), nullptr);
  NameSearch search;
  for (const ParamRef& p : params) {
    const int rc = pcre2_match(code->get(), reinterpret_cast<PCRE2_SPTR>(p.name.data()),
                               p.name.size(), 0, 0, match, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      search.match_error = absl::InvalidArgumentError(
          absl::StrCat(key, "=\"", pattern, "\": matching ", p.name, " failed (PCRE2 ", rc, ")"));
      search.found.assign(params.size(), false);
      break;
    }
    search.found.push_back(rc >= 0);
  }
  pcre2_match_data_free(match);
  return search;
}

// Adam divides by sqrt(v) + eps: with eps 0 (in float32) a parameter whose gradient is exactly 0,
// as an embedding row no batch token uses, gets 0 / 0.
absl::Status CheckEps(double eps, const std::string& key) {
  if (static_cast<float>(eps) != 0.0f) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      key, " = ", eps, eps == 0 ? "" : " (0 in float32)",
      ": a parameter whose gradient is exactly 0 (an embedding row of a token no batch holds) "
      "would be updated by 0/0 = NaN; expected a value > 0 (torch's default 1e-8)"));
}

// Refused as the optimizer is made, naming `lr_key`, rather than by ATen at the first step.
absl::Status CheckUpdateScalars(const AdamSettings& h, const std::string& lr_key) {
  const std::string past = AdamScalarsPastFloat32(h.lr, h.beta1, h.weight_decay, h.decoupled);
  if (past.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(lr_key, " = ", FormatNumber(h.lr), ": ", past, "; expected a smaller lr"));
}

// A group's settings: [optimizer]'s, overridden by the keys the group sets.
absl::StatusOr<AdamSettings> GroupHyperparameters(const JobConfig::Optimizer::ParamGroup& spec,
                                                  const AdamSettings& defaults,
                                                  const std::string& key) {
  if (!spec.has_pattern()) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": pattern missing (a regular expression naming its parameters)"));
  }
  // Refused rather than read as ".*": an empty value is likelier a slip than a group of everything.
  if (spec.pattern().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ".pattern = \"\": an empty pattern matches every parameter; write \".*\" for that"));
  }
  if (spec.betas_size() != 0 && spec.betas_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ".betas: expected 2 values (beta1, beta2), got ", spec.betas_size()));
  }
  if (spec.betas_size() != 0 && (spec.has_beta1() || spec.has_beta2())) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": betas and beta1/beta2 set the same values; set only one of them"));
  }
  AdamSettings h = defaults;
  if (spec.has_lr()) h.lr = spec.lr();
  if (spec.has_weight_decay()) h.weight_decay = spec.weight_decay();
  if (spec.has_eps()) {
    if (absl::Status eps = CheckEps(spec.eps(), key + ".eps"); !eps.ok()) return eps;
    h.eps = spec.eps();
  }
  if (spec.has_beta1()) h.beta1 = spec.beta1();
  if (spec.has_beta2()) h.beta2 = spec.beta2();
  if (spec.betas_size() == 2) {
    h.beta1 = spec.betas(0);
    h.beta2 = spec.betas(1);
  }
  if (absl::Status scalars = CheckUpdateScalars(h, key + " lr"); !scalars.ok()) return scalars;
  return h;
}

// torch's _single_tensor_adam (capturable, differentiable, maximize and amsgrad off).
void ForLoopUpdate(const StepTensors& t, const AdamSettings& h) {
  for (size_t i = 0; i < t.params.size(); ++i) {
    const at::Tensor& param = t.params[i];
    at::Tensor grad = t.grads[i];
    t.steps[i].add_(1);
    if (h.weight_decay != 0) {
      if (h.decoupled) {
        param.mul_(1 - h.lr * h.weight_decay);
      } else {
        grad = grad.add(param, h.weight_decay);
      }
    }
    t.exp_avgs[i].lerp_(grad, 1 - h.beta1);
    t.exp_avg_sqs[i].mul_(h.beta2).addcmul_(grad, grad, 1 - h.beta2);
    const double step = t.steps[i].item<double>();
    const double bias_correction1 = 1 - std::pow(h.beta1, step);
    const double bias_correction2 = 1 - std::pow(h.beta2, step);
    const double step_size = h.lr / bias_correction1;
    // torch writes bias_correction2 ** 0.5: pow, which need not round as sqrt does.
    const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    at::Tensor denom = (t.exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(h.eps);
    param.addcdiv_(t.exp_avgs[i], denom, -step_size);
  }
}

// Splits `t` by the parameters' device and dtype, in order of first appearance, as torch's
// _group_tensors_by_device_and_dtype does before each foreach or fused call.
std::vector<StepTensors> ByDeviceAndDtype(const StepTensors& t) {
  std::vector<std::pair<at::Device, at::ScalarType>> keys;
  std::vector<StepTensors> buckets;
  for (size_t i = 0; i < t.params.size(); ++i) {
    const std::pair<at::Device, at::ScalarType> key(t.params[i].device(),
                                                    t.params[i].scalar_type());
    size_t b = 0;
    while (b < keys.size() && keys[b] != key) ++b;
    if (b == keys.size()) {
      keys.push_back(key);
      buckets.emplace_back();
    }
    buckets[b].Add(t.params[i], t.grads[i], t.exp_avgs[i], t.exp_avg_sqs[i], t.steps[i]);
  }
  return buckets;
}

// torch's _multi_tensor_adam (capturable, maximize and amsgrad off).
void ForeachUpdate(const StepTensors& all, const AdamSettings& h) {
  for (const StepTensors& t : ByDeviceAndDtype(all)) {
    at::_foreach_add_(t.steps, 1);
    std::vector<at::Tensor> grads = t.grads;
    if (h.weight_decay != 0) {
      if (h.decoupled) {
        at::_foreach_mul_(t.params, 1 - h.lr * h.weight_decay);
      } else {
        grads = at::_foreach_add(t.grads, t.params, h.weight_decay);
      }
    }
    at::_foreach_lerp_(t.exp_avgs, grads, 1 - h.beta1);
    at::_foreach_mul_(t.exp_avg_sqs, h.beta2);
    at::_foreach_addcmul_(t.exp_avg_sqs, grads, grads, 1 - h.beta2);
    std::vector<at::Scalar> step_sizes;
    std::vector<at::Scalar> bias_corrections2_sqrt;
    for (const at::Tensor& step_tensor : t.steps) {
      const double step = step_tensor.item<double>();
      step_sizes.emplace_back((h.lr / (1 - std::pow(h.beta1, step))) * -1);
      bias_corrections2_sqrt.emplace_back(std::pow(1 - std::pow(h.beta2, step), 0.5));
    }
    std::vector<at::Tensor> denoms = at::_foreach_sqrt(t.exp_avg_sqs);
    at::_foreach_div_(denoms, bias_corrections2_sqrt);
    at::_foreach_add_(denoms, h.eps);
    at::_foreach_addcdiv_(t.params, t.exp_avgs, denoms, step_sizes);
  }
}

// The fused kernels take lr as a double and round it to the parameters' type inside, where an lr
// past that type's range turns the weights to inf without a word; the for-loop and foreach paths
// refuse it as they convert their scalars ("value cannot be converted to type float without
// overflow"), so the fused ones refuse it the same way.
void CheckLrFitsParams(const at::Tensor& param, double lr) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, param.scalar_type(), "lr",
                                  [&] { static_cast<void>(at::Scalar(lr).to<scalar_t>()); });
}

// torch's _fused_adam: at::_fused_adamw_ (decoupled) or at::_fused_adam_, one call per device and
// dtype. The double-lr overload: torch takes it for a float lr, and on CPU the tensor_lr one gives
// the same bits only for a float64 lr tensor.
void FusedUpdate(const StepTensors& all, const AdamSettings& h) {
  for (const StepTensors& t : ByDeviceAndDtype(all)) {
    CheckLrFitsParams(t.params.front(), h.lr);
    at::_foreach_add_(t.steps, 1);
    using FusedAdam =
        void (*)(at::TensorList, at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                 at::TensorList, double, double, double, double, double, bool, bool,
                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>&);
    const FusedAdam fused =
        h.decoupled ? FusedAdam{&at::_fused_adamw_} : FusedAdam{&at::_fused_adam_};
    fused(t.params, t.grads, t.exp_avgs, t.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, t.steps, h.lr,
          h.beta1, h.beta2, h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false,
          /*grad_scale=*/std::nullopt, /*found_inf=*/std::nullopt);
  }
}

// titan's multi-tensor kernel (lib/kernels/adam.h): _fused_adam(w)_'s math and bits in one pass,
// the gradient scale applied within it, and the bf16 copies linears asked for written in it.
void KernelUpdate(const StepTensors& all, const AdamSettings& h, const at::Tensor& grad_scale) {
  for (const StepTensors& t : ByDeviceAndDtype(all)) {
    CheckLrFitsParams(t.params.front(), h.lr);
    at::_foreach_add_(t.steps, 1);
    std::vector<at::Tensor> copies;
    for (const at::Tensor& param : t.params) copies.push_back(Bf16WeightCopyToWrite(param));
    FusedAdamStep(t.params, t.grads, t.exp_avgs, t.exp_avg_sqs, t.steps, h, grad_scale, copies);
    for (size_t i = 0; i < copies.size(); ++i) {
      if (copies[i].defined()) Bf16WeightCopyWritten(t.params[i]);
    }
  }
}

// Which kernel the fused implementation runs and, for ATen's, why: read as a choice, not an error.
std::string FusedChoice(const absl::Status& kernel_supported, const std::vector<ParamRef>& params) {
  if (kernel_supported.ok()) return "titan's multi-tensor Adam kernel";
  if (!params.empty() && !params[0].tensor->is_cuda()) {
    return absl::StrCat(
        "ATen's _fused_adam(w)_ (titan's multi-tensor Adam kernel is for CUDA "
        "tensors; the parameters are on ",
        params[0].tensor->device().str(), ")");
  }
  return absl::StrCat(
      "ATen's _fused_adam(w)_ (titan's multi-tensor Adam kernel does not take these tensors: ",
      kernel_supported.message(), ")");
}

// OK when every group's tensors, and the gradient scale, can take titan's kernel.
absl::Status KernelSupports(const std::vector<StepTensors>& groups, const at::Tensor& grad_scale) {
  for (const StepTensors& group : groups) {
    for (const StepTensors& t : ByDeviceAndDtype(group)) {
      absl::Status status =
          FusedAdamSupports(t.params, t.grads, t.exp_avgs, t.exp_avg_sqs, t.steps, grad_scale);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const std::vector<ParamRef>& params,
                                                             const JobConfig::Optimizer& config,
                                                             const SumOverStages& sum_over_stages) {
  if (config.name() != "AdamW" && config.name() != "Adam") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[optimizer] name: expected \"AdamW\" or \"Adam\", got \"", config.name(), "\""));
  }
  const absl::flat_hash_map<std::string, Implementation> implementations = {
      {"for-loop", Implementation::kForLoop},
      {"foreach", Implementation::kForeach},
      {"fused", Implementation::kFused}};
  auto implementation = implementations.find(config.implementation());
  if (implementation == implementations.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[optimizer] implementation: expected \"for-loop\", \"foreach\" or \"fused\", "
                     "got \"",
                     config.implementation(), "\""));
  }
  if (absl::Status eps = CheckEps(config.eps(), "[optimizer] eps"); !eps.ok()) return eps;
  const AdamSettings defaults{config.lr(),  config.beta1(),        config.beta2(),
                              config.eps(), config.weight_decay(), config.name() == "AdamW"};
  if (absl::Status scalars = CheckUpdateScalars(defaults, "[optimizer] lr"); !scalars.ok()) {
    return scalars;
  }
  TITAN_ASSIGN_OR_RETURN(std::vector<Group> groups, ClaimParams(params, config, defaults));
  std::vector<int64_t> totals;
  for (const Group& group : groups) totals.push_back(group.params.size());
  for (int g = 0; g < config.param_groups_size(); ++g)
    totals.push_back(!groups[g].match_error.ok());
  // Every rank reaches this sum: the errors above come from the config alone, alike on all ranks.
  if (sum_over_stages != nullptr) {
    TITAN_ASSIGN_OR_RETURN(totals, sum_over_stages(totals));
  }
  for (int g = 0; g < config.param_groups_size(); ++g) {
    if (totals[groups.size() + g] == 0) continue;
    if (!groups[g].match_error.ok()) return groups[g].match_error;
    return absl::InvalidArgumentError(absl::StrCat(
        "[optimizer] param_groups[", g, "].pattern=\"", groups[g].pattern,
        "\": matching a name on another pipeline stage failed (that stage's rank names it)"));
  }
  for (int g = 0; g < config.param_groups_size(); ++g) {
    if (totals[g] > 0) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("[optimizer] param_groups[", g, "].pattern=\"", groups[g].pattern,
                     "\" matches no parameter that an earlier group has not claimed"));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (totals[g] == 0) continue;
    const Group& group = groups[g];
    LOG(INFO) << "optimizer " << config.name() << " (" << config.implementation()
              << "): " << group.params.size()
              << (sum_over_stages != nullptr
                      ? absl::StrCat(" params of this rank's stages (", totals[g], " in the model)")
                      : " params")
              << " matching "
              << (group.pattern.empty() ? "no pattern" : "\"" + group.pattern + "\"") << ": lr "
              << group.hyper.lr << ", weight_decay " << group.hyper.weight_decay;
  }
  // A group's parameters may all be on other stages.
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const Group& group) { return group.params.empty(); }),
               groups.end());
  return std::unique_ptr<Optimizer>(
      new Optimizer(params, std::move(groups), implementation->second, config.lr()));
}

absl::StatusOr<std::vector<Optimizer::Group>> Optimizer::ClaimParams(
    const std::vector<ParamRef>& params, const JobConfig::Optimizer& config,
    const AdamSettings& defaults) {
  std::vector<Group> groups;
  std::vector<bool> claimed(params.size(), false);
  for (int g = 0; g < config.param_groups_size(); ++g) {
    const JobConfig::Optimizer::ParamGroup& spec = config.param_groups(g);
    const std::string key = absl::StrCat("[optimizer] param_groups[", g, "]");
    TITAN_ASSIGN_OR_RETURN(const AdamSettings hyper, GroupHyperparameters(spec, defaults, key));
    TITAN_ASSIGN_OR_RETURN(NameSearch search,
                           SearchNames(spec.pattern(), params, absl::StrCat(key, ".pattern")));
    Group group{spec.pattern(), hyper, {}, std::move(search.match_error)};
    for (size_t i = 0; i < params.size(); ++i) {
      if (claimed[i] || !search.found[i]) continue;
      claimed[i] = true;
      group.params.push_back(i);
    }
    groups.push_back(std::move(group));
  }
  Group rest{"", defaults, {}, absl::OkStatus()};
  for (size_t i = 0; i < params.size(); ++i) {
    if (!claimed[i]) rest.params.push_back(i);
  }
  groups.push_back(std::move(rest));
  return groups;
}

Optimizer::Optimizer(std::vector<ParamRef> params, std::vector<Group> groups,
                     Implementation implementation, double base_lr)
    : params_(std::move(params)),
      state_(params_.size()),
      groups_(std::move(groups)),
      implementation_(implementation),
      base_lr_(base_lr) {}

Optimizer::~Optimizer() {
  for (const ParamRef& p : params_) DropBf16WeightCopy(*p.tensor);
}

void Optimizer::ZeroGrad(bool set_to_none) {
  for (const ParamRef& p : params_) {
    at::Tensor& grad = p.tensor->mutable_grad();
    if (set_to_none) {
      grad.reset();
    } else if (grad.defined()) {
      grad.zero_();
    }
  }
}

void Optimizer::Step(const at::Tensor& grad_scale) {
  c10::NoGradGuard no_grad;
  std::vector<StepTensors> group_tensors(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i : groups_[g].params) {
      const at::Tensor& param = *params_[i].tensor;
      if (!param.grad().defined()) continue;
      if (!state_[i].step.defined()) CreateState(i, 0);
      group_tensors[g].Add(param, param.grad(), state_[i].exp_avg, state_[i].exp_avg_sq,
                           state_[i].step);
    }
  }
  bool kernel = false;
  if (implementation_ == Implementation::kFused) {
    const absl::Status supported = KernelSupports(group_tensors, grad_scale);
    kernel = supported.ok();
    if (!kernel_logged_) {
      LOG(INFO) << "optimizer (fused): " << FusedChoice(supported, params_);
      kernel_logged_ = true;
    }
  }
  if (!kernel) {
    std::vector<at::Tensor> params;
    for (const ParamRef& p : params_) params.push_back(*p.tensor);
    ScaleGrads(params, grad_scale);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const StepTensors& tensors = group_tensors[g];
    if (tensors.params.empty()) continue;
    AdamSettings h = groups_[g].hyper;
    h.lr *= lr_factor_;
    switch (implementation_) {
      case Implementation::kForLoop:
        ForLoopUpdate(tensors, h);
        break;
      case Implementation::kForeach:
        ForeachUpdate(tensors, h);
        break;
      case Implementation::kFused:
        if (kernel) {
          KernelUpdate(tensors, h, grad_scale);
        } else {
          FusedUpdate(tensors, h);
        }
        break;
    }
  }
}

void Optimizer::SetLrFactor(double factor) { lr_factor_ = factor; }

double Optimizer::lr() const { return base_lr_ * lr_factor_; }

void Optimizer::CreateState(size_t i, double step) {
  const at::Tensor& param = *params_[i].tensor;
  ParamState& s = state_[i];
  s.exp_avg = at::zeros_like(param, at::MemoryFormat::Preserve);
  s.exp_avg_sq = at::zeros_like(param, at::MemoryFormat::Preserve);
  const at::Device device =
      implementation_ == Implementation::kFused ? param.device() : at::Device(at::kCPU);
  s.step = at::scalar_tensor(step, at::TensorOptions().dtype(at::kFloat).device(device));
}

void Optimizer::InitState() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!state_[i].step.defined()) CreateState(i, 0);
  }
}

NamedTensors Optimizer::StateDict() const {
  std::vector<at::Tensor> steps;
  for (const ParamState& s : state_) {
    if (s.step.defined()) steps.push_back(s.step);
  }
  // Fused keeps each step on the GPU: one host read for all of them, not one per parameter.
  const at::Tensor host_steps =
      steps.empty() ? at::zeros({0}, at::kLong) : at::stack(steps).to(at::kCPU, at::kLong);
  const int64_t* step_values = host_steps.data_ptr<int64_t>();
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamState& s = state_[i];
    if (!s.step.defined()) continue;
    out.emplace_back(params_[i].name + ".exp_avg", s.exp_avg);
    out.emplace_back(params_[i].name + ".exp_avg_sq", s.exp_avg_sq);
    out.emplace_back(params_[i].name + ".step", at::scalar_tensor(*step_values++, at::kLong));
  }
  return out;
}

std::vector<at::Tensor> Optimizer::StateTensors() const {
  std::vector<at::Tensor> out;
  for (const ParamState& s : state_) {
    if (!s.step.defined()) continue;
    out.insert(out.end(), {s.exp_avg, s.exp_avg_sq, s.step});
  }
  return out;
}

absl::Status Optimizer::LoadStateDict(const NamedTensors& state) {
  absl::flat_hash_map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamRef& p = params_[i];
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
    // Into the held state: a checkpoint loaded into StateDict()'s tensors is then not copied, and
    // the moments are never held twice.
    if (!state_[i].step.defined()) CreateState(i, 0);
    state_[i].exp_avg.copy_(avg->second);
    state_[i].exp_avg_sq.copy_(avg_sq->second);
    state_[i].step.fill_(static_cast<double>(step->second.item<int64_t>()));
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
