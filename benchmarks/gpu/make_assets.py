"""Writes the benchmark's model folder: Llama 3.1 8B's config.json with 8 layers (titan reads the
shape with [model] flavor = "from_checkpoint") beside the bundled tokenizer (both frameworks read
it from hf_assets_path), and the corpus folder torchtitan's c4_test loader reads."""
import json
import os
import shutil
import sys

out = sys.argv[1]
os.makedirs(os.path.join(out, "model"), exist_ok=True)
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}
if os.environ.get("BENCH_TINY") == "1":  # h200_bench.sh's dry run on CPU
    config.update(hidden_size=256, intermediate_size=768, num_attention_heads=8,
                  num_key_value_heads=2, num_hidden_layers=2, head_dim=32)
with open(os.path.join(out, "model", "config.json"), "w") as f:
    json.dump(config, f, indent=2)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join("default_tokenizer", name), os.path.join(out, "model", name))
os.makedirs(os.path.join(out, "corpus"), exist_ok=True)
shutil.copy(os.path.join("default_corpus", "train.jsonl"), os.path.join(out, "corpus", "train.jsonl"))
