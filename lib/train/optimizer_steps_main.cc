// Test helper: runs Optimizer steps on fixed data and writes the result.
//
//   optimizer_steps IN.safetensors OUT.safetensors [--optimizer.KEY=VALUE ...]
//
// IN holds "param/<name>" (the parameters, in the order of its comma-separated "names" metadata),
// "grad/<k>/<name>" (the gradient for step k; absent: no gradient that step) and "lr_factors"
// (float64, one schedule factor per step). OUT holds the parameters under their names and the
// optimizer's StateDict(). The flags are job-config overrides, parsed as titan_train parses them.
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/config/job_config.h"
#include "lib/train/optimizer.h"

namespace titan {
namespace {

absl::Status Run(const std::string& in, const std::string& out,
                 const std::vector<std::string>& overrides) {
  absl::StatusOr<JobConfig> config = ParseJobConfigText("", "optimizer_steps", overrides);
  if (!config.ok()) return config.status();
  if (absl::Status status = ValidateJobConfig(*config); !status.ok()) return status;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(in);
  if (!file.ok()) return file.status();
  auto names = file->metadata().find("names");
  if (names == file->metadata().end()) return absl::NotFoundError(in + ": no \"names\" metadata");

  std::vector<std::string> order = absl::StrSplit(names->second, ',');
  std::vector<at::Tensor> tensors(order.size());
  std::vector<ParamRef> params;
  for (size_t i = 0; i < order.size(); ++i) {
    absl::StatusOr<at::Tensor> tensor = file->Load("param/" + order[i]);
    if (!tensor.ok()) return tensor.status();
    tensors[i] = tensor->set_requires_grad(true);
    params.push_back({order[i], &tensors[i]});
  }
  absl::StatusOr<at::Tensor> factors = file->Load("lr_factors");
  if (!factors.ok()) return factors.status();

  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer =
      Optimizer::Create(params, config->optimizer());
  if (!optimizer.ok()) return optimizer.status();
  for (int64_t step = 0; step < factors->numel(); ++step) {
    (*optimizer)->ZeroGrad();
    for (size_t i = 0; i < order.size(); ++i) {
      const std::string grad_name = absl::StrCat("grad/", step, "/", order[i]);
      if (file->Find(grad_name) == nullptr) continue;
      absl::StatusOr<at::Tensor> grad = file->Load(grad_name);
      if (!grad.ok()) return grad.status();
      tensors[i].mutable_grad() = *grad;
    }
    (*optimizer)->SetLrFactor(factors->data_ptr<double>()[step]);
    (*optimizer)->Step();
  }

  NamedTensors result = (*optimizer)->StateDict();
  for (size_t i = 0; i < order.size(); ++i) result.emplace_back(order[i], tensors[i].detach());
  return WriteSafetensors(out, result);
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0]
              << " IN.safetensors OUT.safetensors [--optimizer.KEY=VALUE]\n";
    return 2;
  }
  const absl::Status status =
      titan::Run(argv[1], argv[2], std::vector<std::string>(argv + 3, argv + argc));
  if (!status.ok()) {
    std::cerr << "optimizer_steps: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
