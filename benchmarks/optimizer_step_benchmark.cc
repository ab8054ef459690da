// optimizer_step_benchmark: the time of one AdamW step for each [optimizer] implementation
// (for-loop, foreach, fused) on the same parameters and gradients, back to back in one process,
// interleaved round by round; prints each implementation's median step and its ratio to for-loop.
// Shapes: the Llama 3 debug model's 57 tensors (6.2M parameters), or with `8b_layer` one Llama 3
// 8B block (9 tensors, 218M parameters). CPU, fp32.
//
//   bazel run -c opt //benchmarks:optimizer_step_benchmark -- [debug|8b_layer] [rounds]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/config/job_config.pb.h"
#include "lib/model/module.h"
#include "lib/train/optimizer.h"

namespace {

std::vector<std::vector<int64_t>> Shapes(const std::string& which) {
  if (which == "8b_layer") {
    return {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096}, {14336, 4096},
            {4096, 14336}, {14336, 4096}, {4096}, {4096}};
  }
  std::vector<std::vector<int64_t>> shapes = {{2048, 256}, {256}, {2048, 256}};
  for (int layer = 0; layer < 6; ++layer) {
    for (const std::vector<int64_t>& s : std::vector<std::vector<int64_t>>{
             {256, 256}, {256, 256}, {256, 256}, {256, 256}, {768, 256}, {256, 768},
             {768, 256}, {256}, {256}}) {
      shapes.push_back(s);
    }
  }
  return shapes;
}

double StepSeconds(titan::Optimizer& optimizer) {
  const auto start = std::chrono::steady_clock::now();
  optimizer.Step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "debug";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::vector<std::string> kinds = {"for-loop", "foreach", "fused"};
  std::map<std::string, std::vector<at::Tensor>> tensors;
  std::map<std::string, std::unique_ptr<titan::Optimizer>> optimizers;
  int64_t numel = 0;
  for (const std::string& kind : kinds) {
    at::manual_seed(0);
    std::vector<titan::ParamRef> params;
    std::vector<at::Tensor>& mine = tensors[kind];
    mine.reserve(64);  // ParamRef points into it: no reallocation
    for (const std::vector<int64_t>& shape : Shapes(which)) {
      mine.push_back(at::randn(shape));
      mine.back().mutable_grad() = at::randn(shape);
    }
    numel = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      params.push_back({"p" + std::to_string(i), &mine[i]});
      numel += mine[i].numel();
    }
    titan::JobConfig::Optimizer config;
    config.set_implementation(kind);
    auto optimizer = titan::Optimizer::Create(params, config);
    if (!optimizer.ok()) {
      std::fprintf(stderr, "%s\n", std::string(optimizer.status().message()).c_str());
      return 1;
    }
    optimizers[kind] = std::move(*optimizer);
    optimizers[kind]->Step();  // creates the state: later steps are steady
  }
  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& kind : kinds) times[kind].push_back(StepSeconds(*optimizers[kind]));
  }
  std::printf("AdamW step, %s shapes (%zu tensors, %lld parameters), %d rounds, %d threads\n",
              which.c_str(), tensors["fused"].size(), static_cast<long long>(numel), rounds,
              at::get_num_threads());
  double for_loop = 0;
  for (const std::string& kind : kinds) {
    std::vector<double>& t = times[kind];
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    if (kind == "for-loop") for_loop = median;
    std::printf("  %-9s median %8.3f ms  (min %8.3f)  vs for-loop %.2fx\n", kind.c_str(),
                median * 1e3, t.front() * 1e3, for_loop / median);
  }
  return 0;
}
