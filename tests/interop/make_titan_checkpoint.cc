// Writes a small random Llama 3 (GQA, Llama 3.1 RoPE scaling) as a titan checkpoint, and titan's
// forward logits on a fixed token batch, for the transformers parity test.

#include <c10/core/GradMode.h>

#include <iostream>
#include <string>

#include "gflags/gflags.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/registry/model_spec.h"

DEFINE_string(checkpoint_dir, "", "Checkpoint root to write step-<step> into");
DEFINE_int64(step, 3, "Step to save as");
DEFINE_string(logits, "",
              "safetensors file for \"tokens\" [B, S] and titan's \"logits\" [B, S, V]");
DEFINE_int64(seed, 1234, "Weight seed");
DEFINE_int64(original_max_position_embeddings, 32,
             "Llama 3 RoPE scaling's original context (Meta's params.json can say only 8192)");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_checkpoint_dir.empty() || FLAGS_logits.empty()) {
    std::cerr << "make_titan_checkpoint: --checkpoint_dir and --logits are required\n";
    return 1;
  }
  const titan::ModelSpec& spec = **titan::FindModel("llama3");
  titan::TransformerArgs args = spec.defaults;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 128;
  args.ffn_hidden_dim = titan::FeedForwardHiddenDim(args.dim, /*multiple_of=*/32, 0);
  args.max_seq_len = 256;
  // Original context 32 with head_dim 16: RoPE scaling touches low, smoothed and high frequencies.
  args.rope.scaling = titan::RopeScalingType::kLlama3;
  args.rope.factor = 8;
  args.rope.original_max_position_embeddings = FLAGS_original_max_position_embeddings;
  const titan::ModelInfo info = titan::DescribeModel(spec, args, 1, 2);

  at::manual_seed(FLAGS_seed);
  std::unique_ptr<titan::Decoder> model = spec.Build(args, at::TensorOptions().device(at::kMeta));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  titan::CheckpointState state;
  {
    c10::NoGradGuard no_grad;
    for (const titan::ParamRef& param : model->NamedParameters()) {
      // Norm weights off 1 so that a swapped norm mapping changes the logits.
      if (param.tensor->dim() == 1) param.tensor->add_(at::randn_like(*param.tensor) * 0.2);
      state.model.emplace_back(param.name, param.tensor->detach());
    }
  }
  state.extra["model"] = titan::ModelInfoToJson(info);
  absl::Status status = titan::CheckpointManager(FLAGS_checkpoint_dir, 0)
                            .Save(FLAGS_step, state, /*model_only=*/true);
  if (!status.ok()) {
    std::cerr << "make_titan_checkpoint: " << status.message() << "\n";
    return 1;
  }
  const at::Tensor tokens = at::randint(args.vocab_size, {2, 48}, at::kLong);
  at::Tensor logits;
  {
    c10::NoGradGuard no_grad;
    logits = model->Forward(tokens);
  }
  status = titan::WriteSafetensors(FLAGS_logits, {{"tokens", tokens}, {"logits", logits}});
  if (!status.ok()) {
    std::cerr << "make_titan_checkpoint: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
