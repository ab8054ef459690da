"""Writes the seed corpora in fuzz/corpus/<target>/ with the reference writers (safetensors,
transformers, torch.save): valid-* files must parse, invalid-* files must be rejected (each names
the corruption), edge-* files may go either way but must not crash. Run with tools/setup.sh's Python: python3 fuzz/make_seed_corpus.py fuzz/corpus
"""
import io
import json
import os
import struct
import sys
import zipfile

import torch
import transformers
from safetensors.torch import save

out = sys.argv[1]


def write(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


# safetensors_header
tensors = {"a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
           "b": torch.ones(4, dtype=torch.bfloat16), "c": torch.zeros(0, dtype=torch.int64)}
good = save(tensors, metadata={"format": "pt"})
write("safetensors_header", "valid-three_tensors.safetensors", good)
write("safetensors_header", "valid-no_tensors.safetensors", save({}))


def with_header(header, data=b"", length=None):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text) if length is None else length) + text + data


write("safetensors_header", "invalid-length_past_end.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4,
                  length=1 << 20))
write("safetensors_header", "invalid-length_huge.safetensors", struct.pack("<Q", 2**64 - 1) + b"{}")
write("safetensors_header", "invalid-truncated_length.safetensors", b"\x08\0\0")
write("safetensors_header", "invalid-overlapping_offsets.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
write("safetensors_header", "invalid-gap_between_tensors.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                   "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, b"\0" * 12))
write("safetensors_header", "invalid-offsets_past_end.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8))
write("safetensors_header", "invalid-shape_size_mismatch.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
write("safetensors_header", "invalid-unknown_dtype.safetensors",
      with_header({"a": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4))
write("safetensors_header", "invalid-negative_dim.safetensors",
      with_header({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4))
write("safetensors_header", "invalid-not_json.safetensors", struct.pack("<Q", 8) + b"{\"a\":[  ")
write("safetensors_header", "invalid-header_is_list.safetensors", with_header([1, 2]))
write("safetensors_header", "invalid-truncated.safetensors", good[: len(good) - 5])

# hf_config
config = transformers.LlamaConfig(
    vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
    rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
    rope_scaling={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192})
write("hf_config", "valid-llama3_2_1b.json", config.to_json_string())
tiny = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "rope_scaling": {"type": "default"}, "rope_theta": 10000.0}
write("hf_config", "valid-tiny_legacy_rope.json", json.dumps(tiny))
write("hf_config", "invalid-not_object.json", "[1, 2, 3]")
write("hf_config", "invalid-truncated.json", config.to_json_string()[:200])
write("hf_config", "invalid-rope_type_is_number.json",
      json.dumps({**tiny, "rope_scaling": {"type": 3}}))
write("hf_config", "valid-rope_yarn.json",
      json.dumps({**tiny, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
write("hf_config", "invalid-rope_dynamic.json",
      json.dumps({**tiny, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}))
write("hf_config", "invalid-unknown_model_type.json", json.dumps({**tiny, "model_type": "gpt2"}))
qwen3 = transformers.Qwen3Config(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=151643,
    eos_token_id=151645)
write("hf_config", "valid-qwen3_0_6b.json", qwen3.to_json_string())
write("hf_config", "invalid-qwen3_sliding_window.json",
      json.dumps({**json.loads(qwen3.to_json_string()),
                  "layer_types": ["sliding_attention"] * 28}))
write("hf_config", "invalid-attention_bias.json", json.dumps({**tiny, "attention_bias": True}))
write("hf_config", "invalid-heads_do_not_divide.json", json.dumps({**tiny, "num_attention_heads": 5}))
write("hf_config", "invalid-hidden_size_string.json", json.dumps({**tiny, "hidden_size": "64"}))
write("hf_config", "edge-huge_intermediate.json",
      json.dumps({**tiny, "intermediate_size": 2**62}))

# hf_index
index = {"metadata": {"total_size": 1234},
         "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                        "lm_head.weight": "model-00002-of-00002.safetensors"}}
write("hf_index", "valid-two_shards.json", json.dumps(index, indent=2))
write("hf_index", "invalid-no_weight_map.json", json.dumps({"metadata": {}}))
write("hf_index", "invalid-file_in_other_directory.json",
      json.dumps({"weight_map": {"a": "../secrets.safetensors"}}))
write("hf_index", "invalid-absolute_file.json",
      json.dumps({"weight_map": {"a": "/etc/model.safetensors"}}))
write("hf_index", "valid-shard_in_subfolder.json",
      json.dumps({"weight_map": {"a": "sub/model-00001-of-00001.safetensors"}}))
write("hf_index", "invalid-file_not_string.json", json.dumps({"weight_map": {"a": 7}}))
write("hf_index", "invalid-truncated.json", json.dumps(index)[:50])

# meta_pth
state = {"tok_embeddings.weight": torch.randn(4, 3), "norm.weight": torch.ones(3, dtype=torch.bfloat16)}
buffer = io.BytesIO()
torch.save(state, buffer)
pth = buffer.getvalue()
write("meta_pth", "valid-state_dict.pth", pth)
buffer = io.BytesIO()
torch.save({}, buffer)
write("meta_pth", "valid-empty_dict.pth", buffer.getvalue())
buffer = io.BytesIO()
torch.save(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4)).state_dict(), buffer)
write("meta_pth", "valid-ordered_dict_state_dict.pth", buffer.getvalue())
buffer = io.BytesIO()
torch.save({"model": torch.nn.Linear(3, 4).state_dict()}, buffer)
write("meta_pth", "invalid-ordered_dict_nested.pth", buffer.getvalue())
write("meta_pth", "invalid-truncated.pth", pth[: len(pth) // 2])
write("meta_pth", "invalid-not_zip.pth", b"PK\x03\x04" + b"\x00" * 60)
write("meta_pth", "invalid-empty.pth", b"")


def rewrite(records):
    """A torch.save archive with `records` (name -> bytes) replaced or added."""
    source = zipfile.ZipFile(io.BytesIO(pth))
    out_buffer = io.BytesIO()
    with zipfile.ZipFile(out_buffer, "w", zipfile.ZIP_STORED) as zout:
        for info in source.infolist():
            zout.writestr(info.filename, records.get(info.filename.split("/", 1)[1],
                                                     source.read(info.filename)))
    return out_buffer.getvalue()


pickle_name = next(n for n in zipfile.ZipFile(io.BytesIO(pth)).namelist() if n.endswith("data.pkl"))
original_pickle = zipfile.ZipFile(io.BytesIO(pth)).read(pickle_name)
write("meta_pth", "invalid-unknown_pickle_opcode.pth", rewrite({"data.pkl": b"\x80\x02\xff."}))
write("meta_pth", "invalid-code_running_global.pth",
      rewrite({"data.pkl": b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R."}))
write("meta_pth", "invalid-truncated_pickle.pth",
      rewrite({"data.pkl": original_pickle[: len(original_pickle) // 2]}))
write("meta_pth", "invalid-storage_too_small.pth", rewrite({"data/0": b"\0" * 8}))
write("meta_pth", "invalid-list_not_dict.pth", rewrite({"data.pkl": b"\x80\x02]q\x00."}))
