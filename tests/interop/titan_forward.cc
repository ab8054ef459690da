// titan_forward --checkpoint=PATH [--in_hf] [--model=NAME] --tokens=IN --logits=OUT
// Loads a titan, Hugging Face or Meta checkpoint the way the trainer's initial load does (the
// model it holds from DescribeCheckpointAt, built by its family's ModelSpec, weights by
// LoadModelWeights) and writes its fp32 logits for IN's "tokens" ([B, S] int64, safetensors) to
// OUT as "logits" [B, S, V], and what it holds on stdout: the transformers parity tests compare
// them.

#include <c10/core/GradMode.h>

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/load_weights.h"
#include "lib/registry/model_spec.h"
#include "lib/util/status_macros.h"

DEFINE_string(checkpoint, "", "Checkpoint folder: titan step dir or root, HF, Meta");
DEFINE_bool(in_hf, false, "Read --checkpoint as Hugging Face");
DEFINE_string(model, "", "Model family the checkpoint must hold; empty: any");
DEFINE_string(tokens, "", "safetensors file holding \"tokens\" [B, S] int64");
DEFINE_string(logits, "", "safetensors file to write \"logits\" [B, S, V] fp32 to");

namespace titan {
namespace {

absl::Status Run() {
  TITAN_ASSIGN_OR_RETURN(ModelInfo info,
                         DescribeCheckpointAt(FLAGS_checkpoint, FLAGS_in_hf, FLAGS_model));
  std::cout << FLAGS_checkpoint << " holds " << info.name() << " "
            << (info.flavor.empty() ? "custom" : info.flavor) << " ("
            << DescribeArchitecture(info.args) << ")\n";
  std::unique_ptr<Decoder> model =
      info.spec->Build(info.args, at::TensorOptions().device(at::kMeta));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  TITAN_RETURN_IF_ERROR(
      LoadModelWeights(FLAGS_checkpoint, FLAGS_in_hf, info, model->NamedParameters()));
  TITAN_ASSIGN_OR_RETURN(SafetensorsFile tokens_file, SafetensorsFile::Open(FLAGS_tokens));
  TITAN_ASSIGN_OR_RETURN(at::Tensor tokens, tokens_file.Load("tokens"));
  at::Tensor logits;
  {
    c10::NoGradGuard no_grad;
    logits = model->Forward(tokens.to(at::kLong));
  }
  return WriteSafetensors(FLAGS_logits, {{"logits", logits.contiguous()}});
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_checkpoint.empty() || FLAGS_tokens.empty() || FLAGS_logits.empty()) {
    std::cerr << "titan_forward: --checkpoint, --tokens and --logits are required\n";
    return 1;
  }
  const absl::Status status = titan::Run();
  if (!status.ok()) {
    std::cerr << "titan_forward: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
