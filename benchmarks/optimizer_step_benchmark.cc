// optimizer_step_benchmark: the time of one AdamW step, with a clipping scale, for each [optimizer]
// implementation on the same parameters and gradients, back to back in one process, interleaved
// round by round; prints each implementation's median step and its ratio to the first. On the CPU:
// for-loop, foreach, fused. On CUDA: fused by ATen's _fused_adamw_ (after _foreach_mul_ by the
// scale) and fused by titan's kernel ([compile] fused_kernels), and whether their parameters end
// bit for bit equal; `cuda_copies`: titan's kernel without and with the bf16 copies of the 2-D
// weights (but the embedding) that linears ask for (lib/model/bf16_weight_copies.h), and whether
// the parameters agree and each copy holds its parameter's bf16 bits. Shapes: the Llama 3 debug
// model's 57 tensors (6.2M parameters), `8b_layer` one Llama 3 8B block (9 tensors, 218M
// parameters), `8b8l` the 8B model with 8 layers (75 tensors, 2.8B parameters: the H200
// benchmark's). fp32.
//
//   bazel run -c opt //benchmarks:optimizer_step_benchmark -- [debug|8b_layer|8b8l] [rounds]
//   [cpu|cuda|cuda_copies]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/config/job_config.pb.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/model/bf16_weight_copies.h"
#include "lib/model/module.h"
#include "lib/train/optimizer.h"

namespace {

std::vector<std::vector<int64_t>> Shapes(const std::string& which) {
  const std::vector<std::vector<int64_t>> layer_8b = {{4096, 4096},  {1024, 4096},  {1024, 4096},
                                                      {4096, 4096},  {14336, 4096}, {4096, 14336},
                                                      {14336, 4096}, {4096},        {4096}};
  if (which == "8b_layer") return layer_8b;
  if (which == "8b8l") {
    std::vector<std::vector<int64_t>> shapes = {{128256, 4096}};
    for (int layer = 0; layer < 8; ++layer)
      shapes.insert(shapes.end(), layer_8b.begin(), layer_8b.end());
    shapes.push_back({4096});
    shapes.push_back({128256, 4096});
    return shapes;
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

// One step of `kind` (on CUDA, fused-titan turns titan's kernels on, fused-aten off), waited for.
double StepSeconds(titan::Optimizer& optimizer, const std::string& kind, const at::Tensor& scale) {
  const bool cuda = scale.is_cuda();
  if (cuda) {
    titan::SetFusedKernels(kind != "fused-aten");
    at::cuda::getCurrentCUDAStream().synchronize();
  }
  const auto start = std::chrono::steady_clock::now();
  optimizer.Step(scale);
  if (cuda) at::cuda::getCurrentCUDAStream().synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "debug";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string device = argc > 3 ? argv[3] : "cpu";
  const bool cuda = device != "cpu";
  if (cuda && !at::cuda::is_available()) {
    std::fprintf(stderr, "optimizer_step_benchmark: cuda asked for, no CUDA device\n");
    return 1;
  }
  const at::TensorOptions options = at::TensorOptions().device(cuda ? at::kCUDA : at::kCPU);
  const std::vector<std::string> kinds =
      device == "cuda_copies" ? std::vector<std::string>{"fused-titan", "fused-titan+bf16"}
      : cuda                  ? std::vector<std::string>{"fused-aten", "fused-titan"}
                              : std::vector<std::string>{"for-loop", "foreach", "fused"};
  titan::SetBf16WeightCopiesEnabled(device == "cuda_copies");
  // A scale of 1: the same work as any (ATen's path multiplies the gradients in place), while the
  // gradients stay the same round after round for both paths.
  const at::Tensor scale = at::full({}, 1.0f, options);
  std::map<std::string, std::vector<at::Tensor>> tensors;
  std::map<std::string, std::unique_ptr<titan::Optimizer>> optimizers;
  int64_t numel = 0;
  for (const std::string& kind : kinds) {
    at::manual_seed(0);
    std::vector<titan::ParamRef> params;
    std::vector<at::Tensor>& mine = tensors[kind];
    mine.reserve(128);  // ParamRef points into it: no reallocation
    for (const std::vector<int64_t>& shape : Shapes(which)) {
      mine.push_back(at::randn(shape, options));
      mine.back().mutable_grad() = at::randn(shape, options);
    }
    numel = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      params.push_back({"p" + std::to_string(i), &mine[i]});
      numel += mine[i].numel();
    }
    titan::JobConfig::Optimizer config;
    config.set_implementation(cuda ? "fused" : kind);
    auto optimizer = titan::Optimizer::Create(params, config);
    if (!optimizer.ok()) {
      std::fprintf(stderr, "%s\n", std::string(optimizer.status().message()).c_str());
      return 1;
    }
    optimizers[kind] = std::move(*optimizer);
    if (kind == "fused-titan+bf16") {
      for (size_t i = 1; i < mine.size(); ++i) {  // as the linears would ask
        if (mine[i].dim() == 2) titan::Bf16WeightOf(mine[i]);
      }
    }
    StepSeconds(*optimizers[kind], kind, scale);  // creates the state: later steps are steady
  }
  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < rounds; ++r) {
    for (const std::string& kind : kinds) {
      times[kind].push_back(StepSeconds(*optimizers[kind], kind, scale));
    }
  }
  std::printf(
      "AdamW step with a clipping scale, %s shapes (%zu tensors, %lld parameters), %d "
      "rounds, %s\n",
      which.c_str(), tensors[kinds[0]].size(), static_cast<long long>(numel), rounds,
      cuda ? at::cuda::getCurrentDeviceProperties()->name
           : ("CPU, " + std::to_string(at::get_num_threads()) + " threads").c_str());
  double first = 0;
  for (const std::string& kind : kinds) {
    std::vector<double>& t = times[kind];
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    if (kind == kinds[0]) first = median;
    // Each step reads parameter, gradient and both moments and writes three of them: 28 bytes.
    std::printf("  %-11s median %8.3f ms  (min %8.3f)  %6.2f TB/s  vs %s %.2fx\n", kind.c_str(),
                median * 1e3, t.front() * 1e3, 28.0 * numel / median / 1e12, kinds[0].c_str(),
                first / median);
  }
  if (cuda) {
    // One more step with a scale that changes the bits: the timed ones multiplied by 1.
    const at::Tensor clip = at::full({}, 0.75f, options);
    for (const std::string& kind : kinds) StepSeconds(*optimizers[kind], kind, clip);
    bool equal = true;
    for (size_t i = 0; i < tensors[kinds[0]].size(); ++i) {
      equal = equal && at::equal(tensors[kinds[0]][i], tensors[kinds[1]][i]);
    }
    std::printf("  parameters after %d steps (the last clipped by 0.75): %s\n", rounds + 2,
                equal ? "bit for bit equal" : "DIFFER");
    if (!equal) return 1;
    if (device == "cuda_copies") {
      int copies = 0;
      for (const at::Tensor& param : tensors[kinds[1]]) {
        const at::Tensor copy = titan::Bf16WeightCopyToWrite(param);
        if (!copy.defined()) continue;
        ++copies;
        equal = equal && at::equal(copy, param.to(at::kBFloat16));
      }
      std::printf("  %d bf16 copies: %s\n", copies,
                  equal ? "each its parameter's .to(bf16) bits" : "DIFFER");
      if (!equal || copies == 0) return 1;
    }
  }
  return 0;
}
