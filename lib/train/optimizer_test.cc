#include "lib/train/optimizer.h"

#include <c10/core/GradMode.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/profiling/tracking_allocator.h"

namespace titan {
namespace {

const std::vector<std::string> kImplementations = {"for-loop", "foreach", "fused"};

// A matrix, a norm weight and a bias, all ones: enough for groups, decay and the update paths.
struct Params {
  at::Tensor matrix = at::ones({2, 3}).set_requires_grad(true);
  at::Tensor norm = at::ones({3}).set_requires_grad(true);
  at::Tensor bias = at::ones({3}).set_requires_grad(true);
  std::vector<ParamRef> refs() {
    return {{"layers.0.w.weight", &matrix}, {"layers.0.norm.weight", &norm}, {"out.bias", &bias}};
  }
  std::vector<at::Tensor> tensors() const { return {matrix, norm, bias}; }
  // Gradients that vary by element and step, so every state entry differs.
  void SetGrads(int step) {
    for (at::Tensor* t : {&matrix, &norm, &bias}) {
      t->mutable_grad() = at::arange(t->numel(), at::kFloat).reshape(t->sizes()).sin() + step;
    }
  }
  void ZeroGrads() {
    for (at::Tensor* t : {&matrix, &norm, &bias}) t->mutable_grad() = at::zeros_like(*t);
  }
};

JobConfig::Optimizer Config(const std::string& implementation, double lr = 0.1,
                            double weight_decay = 0.5) {
  JobConfig::Optimizer config;
  config.set_implementation(implementation);
  config.set_lr(lr);
  config.set_weight_decay(weight_decay);
  return config;
}

void AddGroup(JobConfig::Optimizer* config, const std::string& pattern,
              std::optional<double> lr = std::nullopt,
              std::optional<double> weight_decay = std::nullopt) {
  JobConfig::Optimizer::ParamGroup* group = config->add_param_groups();
  group->set_pattern(pattern);
  if (lr) group->set_lr(*lr);
  if (weight_decay) group->set_weight_decay(*weight_decay);
}

std::string CreateError(const JobConfig::Optimizer& config) {
  Params p;
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = Optimizer::Create(p.refs(), config);
  EXPECT_FALSE(optimizer.ok());
  return optimizer.ok() ? "" : std::string(optimizer.status().message());
}

// zero_grad(set_to_none=False): the gradients stay allocated where they were (a captured CUDA
// graph accumulates into that storage), as zeros; the default drops them.
TEST(OptimizerTest, ZeroGradKeepsOrDropsTheGradientStorage) {
  Params p;
  auto opt = Optimizer::Create(p.refs(), Config("foreach")).value();
  p.SetGrads(1);
  const void* storage = p.matrix.grad().data_ptr();
  opt->ZeroGrad(/*set_to_none=*/false);
  EXPECT_EQ(p.matrix.grad().data_ptr(), storage);
  EXPECT_TRUE(at::equal(p.matrix.grad(), at::zeros_like(p.matrix)));
  opt->ZeroGrad();
  EXPECT_FALSE(p.matrix.grad().defined());
  opt->ZeroGrad(/*set_to_none=*/false);  // undefined gradients stay undefined
  EXPECT_FALSE(p.norm.grad().defined());
}

// With zero gradients (and zero moments) a step moves a parameter only by decoupled weight decay:
// p × (1 - lr × weight_decay), exact in float up to the one rounding of the product.
TEST(OptimizerTest, ByDefaultEveryParameterDecays) {
  for (const std::string& implementation : kImplementations) {
    Params p;
    auto opt = Optimizer::Create(p.refs(), Config(implementation)).value();
    p.ZeroGrads();
    opt->Step();
    for (const at::Tensor& t : {p.matrix, p.norm, p.bias}) {
      EXPECT_FLOAT_EQ(t.flatten()[0].item<float>(), 1.0f - 0.1f * 0.5f) << implementation;
    }
  }
}

TEST(OptimizerTest, GroupWithDecayZeroLeavesItsParametersUndecayed) {
  for (const std::string& implementation : kImplementations) {
    Params p;
    JobConfig::Optimizer config = Config(implementation);
    AddGroup(&config, "norm|bias$", std::nullopt, 0.0);
    auto opt = Optimizer::Create(p.refs(), config).value();
    p.ZeroGrads();
    opt->Step();
    EXPECT_FLOAT_EQ(p.matrix[0][0].item<float>(), 0.95f) << implementation;
    EXPECT_EQ(p.norm[0].item<float>(), 1.0f) << implementation;
    EXPECT_EQ(p.bias[0].item<float>(), 1.0f) << implementation;
  }
}

TEST(OptimizerTest, ScheduleFactorScalesEachGroupsOwnLr) {
  Params p;
  JobConfig::Optimizer config = Config("foreach", /*lr=*/0.1, /*weight_decay=*/0.5);
  AddGroup(&config, "norm", /*lr=*/0.2);
  auto opt = Optimizer::Create(p.refs(), config).value();
  opt->SetLrFactor(0.5);
  EXPECT_DOUBLE_EQ(opt->lr(), 0.05);
  p.ZeroGrads();
  opt->Step();
  EXPECT_FLOAT_EQ(p.matrix[0][0].item<float>(), 1.0f - 0.05f * 0.5f);  // [optimizer] lr 0.1 × 0.5
  EXPECT_FLOAT_EQ(p.norm[0].item<float>(), 1.0f - 0.1f * 0.5f);        // group lr 0.2 × 0.5
}

TEST(OptimizerTest, FirstMatchingPatternWinsAndPatternsAreSearchedFor) {
  Params p;
  JobConfig::Optimizer config = Config("for-loop");
  AddGroup(&config, "weight$", std::nullopt, 0.0);  // layers.0.w.weight, layers.0.norm.weight
  AddGroup(&config, "orm|^out", /*lr=*/0.2);        // norm is taken: only out.bias is left
  auto opt = Optimizer::Create(p.refs(), config).value();
  p.ZeroGrads();
  opt->Step();
  EXPECT_EQ(p.matrix[0][0].item<float>(), 1.0f);
  EXPECT_EQ(p.norm[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(p.bias[0].item<float>(), 1.0f - 0.2f * 0.5f);
}

TEST(OptimizerTest, BadGroupsAreErrorsNamingThem) {
  JobConfig::Optimizer config = Config("foreach");
  AddGroup(&config, "norm");
  AddGroup(&config, "tok_embeddings");
  EXPECT_EQ(CreateError(config),
            "[optimizer] param_groups[1].pattern=\"tok_embeddings\" matches no parameter that an "
            "earlier group has not claimed");
  config = Config("foreach");
  AddGroup(&config, "weight");
  AddGroup(&config, "norm");  // Its only match went to the first group.
  EXPECT_TRUE(absl::StartsWith(CreateError(config), "[optimizer] param_groups[1].pattern=\"norm\""))
      << CreateError(config);
  config = Config("foreach");
  AddGroup(&config, "norm(");
  EXPECT_TRUE(absl::StartsWith(CreateError(config),
                               "[optimizer] param_groups[0].pattern=\"norm(\": missing closing"))
      << CreateError(config);
  config = Config("foreach");
  config.add_param_groups()->set_lr(0.1);
  EXPECT_EQ(CreateError(config),
            "[optimizer] param_groups[0]: pattern missing (a regular expression naming its "
            "parameters)");
  config = Config("foreach");
  AddGroup(&config, "");
  EXPECT_EQ(CreateError(config),
            "[optimizer] param_groups[0].pattern = \"\": an empty pattern matches every parameter; "
            "write \".*\" for that");
  config = Config("foreach");
  AddGroup(&config, "norm");
  config.mutable_param_groups(0)->add_betas(0.9);
  EXPECT_EQ(CreateError(config),
            "[optimizer] param_groups[0].betas: expected 2 values (beta1, beta2), got 1");
  config.mutable_param_groups(0)->add_betas(0.95);
  config.mutable_param_groups(0)->set_beta1(0.8);
  EXPECT_EQ(CreateError(config),
            "[optimizer] param_groups[0]: betas and beta1/beta2 set the same values; set only one "
            "of them");
  config = Config("foreach");
  config.set_name("SGD");
  EXPECT_EQ(CreateError(config), "[optimizer] name: expected \"AdamW\" or \"Adam\", got \"SGD\"");
}

// Under pipeline parallelism a rank holds one stage: a pattern whose parameters are all on another
// stage is a group there, one that matches on no stage is refused (by every stage alike).
TEST(OptimizerTest, PatternsAreCheckedOverEveryPipelineStage) {
  JobConfig::Optimizer config = Config("foreach");
  AddGroup(&config, "norm", std::nullopt, 0.0);
  AddGroup(&config, "tok_embeddings", /*lr=*/0.2);  // on the other stage only
  std::vector<int64_t> summed;
  // The other stage: one tok_embeddings parameter, two unclaimed ones; counts are the three
  // groups' claims, then per pattern whether matching a name failed.
  const Optimizer::SumOverStages other_stage = [&summed](const std::vector<int64_t>& counts) {
    summed = counts;
    return std::vector<int64_t>{counts[0], counts[1] + 1, counts[2] + 2, counts[3], counts[4]};
  };
  Params p;
  auto opt = Optimizer::Create(p.refs(), config, other_stage).value();
  // This stage's claims (first match wins) and no matching error.
  EXPECT_EQ(summed, (std::vector<int64_t>{1, 0, 2, 0, 0}));
  p.ZeroGrads();
  opt->Step();
  EXPECT_FLOAT_EQ(p.matrix[0][0].item<float>(), 1.0f - 0.1f * 0.5f);
  EXPECT_EQ(p.norm[0].item<float>(), 1.0f);
  config.mutable_param_groups(1)->set_pattern("tok_embedingz");
  const Optimizer::SumOverStages no_stage_matches = [](const std::vector<int64_t>& counts) {
    return std::vector<int64_t>{counts[0], counts[1], counts[2] + 3, counts[3], counts[4]};
  };
  absl::StatusOr<std::unique_ptr<Optimizer>> refused =
      Optimizer::Create(p.refs(), config, no_stage_matches);
  EXPECT_EQ(refused.status().message(),
            "[optimizer] param_groups[1].pattern=\"tok_embedingz\" matches no parameter that an "
            "earlier group has not claimed");
  const Optimizer::SumOverStages failed = [](const std::vector<int64_t>&) {
    return absl::StatusOr<std::vector<int64_t>>(absl::DeadlineExceededError("timed out"));
  };
  EXPECT_EQ(Optimizer::Create(p.refs(), config, failed).status().message(), "timed out");
}

// Matching can fail on one stage's names only (PCRE2's backtracking limit on a long name): the
// rank holding the name says which, the other stages' ranks refuse the pattern too.
TEST(OptimizerTest, AMatchingErrorOnAnyStageIsRefusedByEveryStage) {
  JobConfig::Optimizer config = Config("foreach");
  AddGroup(&config, "(a|b|.|\\w)*(a|b|.|\\w)*(a|b|.|\\w)*(a|b|.|\\w)*\\d{5}");
  std::vector<int64_t> summed;
  const Optimizer::SumOverStages this_stage_fails = [&summed](const std::vector<int64_t>& counts) {
    summed = counts;
    return counts;
  };
  Params p;
  EXPECT_EQ(Optimizer::Create(p.refs(), config, this_stage_fails).status().message(),
            absl::StrCat("[optimizer] param_groups[0].pattern=\"", config.param_groups(0).pattern(),
                         "\": matching layers.0.w.weight failed (PCRE2 -47)"));
  EXPECT_EQ(summed, (std::vector<int64_t>{0, 3, 1}));  // no claims, then the failure flag
  // "out.bias" alone matches without error: a stage holding only it hears of the other's failure.
  ParamRef bias{"out.bias", &p.bias};
  const Optimizer::SumOverStages other_stage_fails = [](const std::vector<int64_t>& counts) {
    return std::vector<int64_t>{counts[0], counts[1], counts[2] + 1};
  };
  EXPECT_EQ(Optimizer::Create({bias}, config, other_stage_fails).status().message(),
            absl::StrCat("[optimizer] param_groups[0].pattern=\"", config.param_groups(0).pattern(),
                         "\": matching a name on another pipeline stage failed (that stage's rank "
                         "names it)"));
}

// eps 0 (or 0 once in float32) turns a parameter with an all-zero gradient into NaN: refused.
TEST(OptimizerTest, EpsThatIsZeroInFloat32IsRefused) {
  JobConfig::Optimizer config = Config("foreach");
  config.set_eps(0);
  EXPECT_TRUE(absl::StartsWith(CreateError(config),
                               "[optimizer] eps = 0: a parameter whose "
                               "gradient is exactly 0"))
      << CreateError(config);
  config.set_eps(1e-300);
  EXPECT_TRUE(absl::StartsWith(CreateError(config), "[optimizer] eps = 1e-300 (0 in float32): "))
      << CreateError(config);
  config = Config("foreach");
  AddGroup(&config, "norm");
  config.mutable_param_groups(0)->set_eps(0);
  EXPECT_TRUE(absl::StartsWith(CreateError(config), "[optimizer] param_groups[0].eps = 0: "))
      << CreateError(config);
  config.mutable_param_groups(0)->set_eps(1e-40);  // subnormal in float32, still > 0
  Params p;
  EXPECT_TRUE(Optimizer::Create(p.refs(), config).ok());
}

// An lr past float32's range is refused by every implementation, with ATen's words: ATen's fused
// kernel would turn the weights to inf without a word.
// ATen would refuse these at the first step ("cannot be converted to type float without
// overflow"), or the fused kernel turn the weights to inf: refused as the optimizer is made.
TEST(OptimizerTest, UpdateScalarsPastFloat32AreRefusedNamingTheSettings) {
  for (const std::string& implementation : kImplementations) {
    Params p;
    // 1e38 fits float32, but the first step's size lr / (1 - 0.9) does not.
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        Optimizer::Create(p.refs(), Config(implementation, /*lr=*/1e38));
    ASSERT_FALSE(opt.ok()) << implementation;
    EXPECT_EQ(opt.status().message(),
              "[optimizer] lr = 1e+38: with beta1 0.9 the first step's size lr / (1 - beta1) = "
              "1e+39 is past float32's range (3.4028234663852886e+38); expected a smaller lr");
    JobConfig::Optimizer config = Config(implementation, /*lr=*/1e-3);
    AddGroup(&config, "norm", /*lr=*/1e20, /*weight_decay=*/1e20);
    opt = Optimizer::Create(p.refs(), config);
    ASSERT_FALSE(opt.ok()) << implementation;
    EXPECT_TRUE(absl::StartsWith(opt.status().message(),
                                 "[optimizer] param_groups[0] lr = 1e+20: lr times weight_decay "
                                 "1e+20 = 1e+40 is past float32's range"))
        << opt.status();
    EXPECT_TRUE(Optimizer::Create(p.refs(), Config(implementation, /*lr=*/3e37)).ok());
  }
}

// for-loop and foreach run the same ATen kernels per tensor (foreach falls back to them on CPU),
// so they agree bitwise; the fused kernel orders its arithmetic differently: 1e-6 relative.
TEST(OptimizerTest, ImplementationsAgree) {
  for (const char* name : {"AdamW", "Adam"}) {
    std::vector<Params> runs(kImplementations.size());
    for (size_t r = 0; r < runs.size(); ++r) {
      JobConfig::Optimizer config = Config(kImplementations[r], 0.01, 0.1);
      config.set_name(name);
      AddGroup(&config, "norm", 0.02, 0.0);
      auto opt = Optimizer::Create(runs[r].refs(), config).value();
      for (int step = 0; step < 5; ++step) {
        runs[r].SetGrads(step);
        opt->Step();
      }
    }
    for (int t = 0; t < 3; ++t) {
      const at::Tensor for_loop = runs[0].tensors()[t];
      EXPECT_FALSE(at::equal(for_loop, at::ones_like(for_loop))) << name << ": nothing moved";
      EXPECT_TRUE(at::equal(for_loop, runs[1].tensors()[t])) << name;
      const at::Tensor fused = runs[2].tensors()[t];
      EXPECT_LE(((fused - for_loop).abs().max() / for_loop.abs().max()).item<double>(), 1e-6)
          << name;
    }
  }
}

// Step(scale) is the clipping multiply then Step(), bit for bit, in every implementation (on the
// CPU none takes titan's CUDA kernel; cuda_kernels_test holds that one to the same bits).
TEST(OptimizerTest, StepWithAGradScaleEqualsScalingTheGradientsFirst) {
  for (const std::string& implementation : kImplementations) {
    Params scaled_inside;
    Params scaled_first;
    auto inside =
        Optimizer::Create(scaled_inside.refs(), Config(implementation, 0.01, 0.1)).value();
    auto first = Optimizer::Create(scaled_first.refs(), Config(implementation, 0.01, 0.1)).value();
    for (int step = 0; step < 3; ++step) {
      // A scale that varies by step (Adam's update ignores a constant one, up to eps).
      const at::Tensor scale = at::full({}, 0.3f + 0.5f * step);
      scaled_inside.SetGrads(step);
      scaled_first.SetGrads(step);
      inside->Step(scale);
      for (const at::Tensor& t : scaled_first.tensors()) t.mutable_grad().mul_(scale);
      first->Step();
    }
    for (int t = 0; t < 3; ++t) {
      EXPECT_TRUE(at::equal(scaled_inside.tensors()[t], scaled_first.tensors()[t]))
          << implementation;
    }
    // The scale mattered: unscaled steps end elsewhere.
    Params unscaled;
    auto plain = Optimizer::Create(unscaled.refs(), Config(implementation, 0.01, 0.1)).value();
    for (int step = 0; step < 3; ++step) {
      unscaled.SetGrads(step);
      plain->Step();
    }
    EXPECT_FALSE(at::equal(unscaled.matrix, scaled_inside.matrix)) << implementation;
  }
}

TEST(OptimizerTest, ParametersWithoutGradientsAreSkipped) {
  Params p;
  auto opt = Optimizer::Create(p.refs(), Config("foreach")).value();
  p.SetGrads(0);
  p.norm.mutable_grad().reset();
  opt->Step();
  EXPECT_EQ(p.norm[0].item<float>(), 1.0f);
  NamedTensors state = opt->StateDict();
  ASSERT_EQ(state.size(), 6u);  // matrix and bias: exp_avg, exp_avg_sq, step
  EXPECT_EQ(state[2].first, "layers.0.w.weight.step");
  EXPECT_EQ(state[2].second.item<int64_t>(), 1);
  // The held tensors themselves: updating through them shows in the next StateDict.
  std::vector<at::Tensor> held = opt->StateTensors();
  ASSERT_EQ(held.size(), 6u);
  EXPECT_TRUE(held[0].is_same(state[0].second));
  EXPECT_EQ(held[2].scalar_type(), at::kFloat);
  held[2].fill_(7);
  EXPECT_EQ(opt->StateDict()[2].second.item<int64_t>(), 7);
  opt->InitState();
  EXPECT_EQ(opt->StateDict().size(), 9u);
  EXPECT_EQ(opt->StateTensors().size(), 9u);
}

TEST(OptimizerTest, LoadIntoHeldStateHoldsTheMomentsOnce) {
  TrackingAllocator& allocator = TrackingAllocator::Install();
  for (const std::string& implementation : kImplementations) {
    at::Tensor weight = at::ones({256, 256}).set_requires_grad(true);
    const int64_t moment_bytes = weight.numel() * 4;
    auto opt = Optimizer::Create({{"w", &weight}}, Config(implementation)).value();
    opt->InitState();
    // What a resume does: the checkpoint is read into StateDict()'s tensors, then loaded.
    NamedTensors state = opt->StateDict();
    state[0].second.fill_(0.5);
    state[1].second.fill_(0.25);
    state[2].second.fill_(4);
    const int64_t live = allocator.live();
    allocator.ResetPeak();
    ASSERT_TRUE(opt->LoadStateDict(state).ok()) << implementation;
    EXPECT_LT(allocator.peak() - live, moment_bytes / 4) << implementation;
    const NamedTensors loaded = opt->StateDict();
    EXPECT_TRUE(loaded[0].second.eq(0.5).all().item<bool>()) << implementation;
    EXPECT_TRUE(loaded[1].second.eq(0.25).all().item<bool>()) << implementation;
    EXPECT_EQ(loaded[2].second.item<int64_t>(), 4) << implementation;
  }
}

TEST(OptimizerTest, StateRoundTripContinuesBitwise) {
  for (const std::string& implementation : kImplementations) {
    Params a, b;
    const JobConfig::Optimizer config = Config(implementation, 0.01, 0.1);
    auto opt_a = Optimizer::Create(a.refs(), config).value();
    for (int step = 0; step < 3; ++step) {
      a.SetGrads(step);
      opt_a->Step();
    }
    // b starts from a's parameters and optimizer state, then both take the same step.
    {
      c10::NoGradGuard no_grad;
      b.matrix.copy_(a.matrix);
      b.norm.copy_(a.norm);
      b.bias.copy_(a.bias);
    }
    auto opt_b = Optimizer::Create(b.refs(), config).value();
    ASSERT_TRUE(opt_b->LoadStateDict(opt_a->StateDict()).ok());
    EXPECT_EQ(opt_b->StateDict().back().second.item<int64_t>(), 3);
    a.SetGrads(3);
    b.SetGrads(3);
    opt_a->Step();
    opt_b->Step();
    EXPECT_TRUE(at::equal(a.matrix, b.matrix)) << implementation;
    EXPECT_TRUE(at::equal(a.norm, b.norm)) << implementation;
    EXPECT_TRUE(at::equal(a.bias, b.bias)) << implementation;
  }
}

TEST(OptimizerTest, LoadRejectsMissingAndUnexpectedState) {
  Params p;
  auto opt = Optimizer::Create(p.refs(), Config("foreach")).value();
  EXPECT_EQ(opt->LoadStateDict({}).message(),
            "optimizer state: no entry for parameter layers.0.w.weight");
  opt->InitState();
  NamedTensors state = opt->StateDict();
  state.emplace_back("extra.exp_avg", at::zeros({1}));
  EXPECT_EQ(opt->LoadStateDict(state).message(), "optimizer state: unexpected entry extra.exp_avg");
}

}  // namespace
}  // namespace titan
