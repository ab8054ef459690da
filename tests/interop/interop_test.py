"""convert_checkpoint against PyPI transformers: HF -> titan -> HF round trips and logit parity."""
import argparse
import collections
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import unittest

import huggingface_hub
import torch
import transformers
from interop_util import config_dict, convert, hf_tensors, run
from safetensors.torch import load_file, save_file

CONVERT = None
MAKE_TITAN = None
INSPECT = None



def small_config(**overrides):
    kwargs = dict(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=1, eos_token_id=2,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    kwargs.update(overrides)
    return transformers.LlamaConfig(**kwargs)


def save_pytorch_bin(model, folder, max_shard_size="50GB", ordered=False):
    """`model` as transformers 4's save_pretrained(..., safe_serialization=False) saved it
    (transformers 5 writes safetensors only): torch.save of the dict shards huggingface_hub splits
    (a tied head kept over the embedding's storage), pytorch_model.bin.index.json when sharded.
    `ordered`: as older transformers saved them, torch.save(model.state_dict()) for one file, and
    each shard an OrderedDict with the state dict's _metadata."""
    os.makedirs(folder)
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    state_dict = model.state_dict()
    split = huggingface_hub.split_torch_state_dict_into_shards(
        state_dict, filename_pattern="pytorch_model{suffix}.bin", max_shard_size=max_shard_size)
    for file, names in split.filename_to_tensors.items():
        if ordered and not split.is_sharded:
            torch.save(state_dict, os.path.join(folder, file))
            continue
        shard = {name: state_dict[name].contiguous() for name in names}
        if ordered:
            shard = collections.OrderedDict(shard)
            shard._metadata = state_dict._metadata
        torch.save(shard, os.path.join(folder, file))
    if split.is_sharded:
        with open(os.path.join(folder, "pytorch_model.bin.index.json"), "w") as f:
            json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f)


def folder_files(folder):
    """Every file under `folder`, relative path -> bytes."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                files[os.path.relpath(os.path.join(root, name), folder)] = f.read()
    return files


# Llama 3.1's scaling (original length 8192): what params.json's use_scaled_rope means.
META_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


class InteropTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), self._testMethodName)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def save_hf(self, config, dtype, **save_kwargs):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(dtype)
        with torch.no_grad():  # Norms off 1 so a swapped norm mapping is visible.
            for name, param in model.named_parameters():
                if param.dim() == 1:
                    param.add_(torch.randn_like(param) * 0.2)
        model.save_pretrained(self.path("hf"), **save_kwargs)
        return model

    def round_trip(self, *flags_back):
        titan = convert(CONVERT, self.path("hf"), self.path("titan"), "--from=hf", "--to=titan")
        back = convert(CONVERT, self.path("titan"), self.path("back"), "--from=titan", "--to=hf",
                       *flags_back)
        original, converted = hf_tensors(self.path("hf")), hf_tensors(self.path("back"))
        self.assertEqual(sorted(original), sorted(converted))
        for name, tensor in original.items():
            self.assertEqual(tensor.dtype, converted[name].dtype, name)
            self.assertTrue(torch.equal(tensor.view(torch.uint8), converted[name].view(torch.uint8)),
                            name)
        self.assertEqual(config_dict(self.path("hf")), config_dict(self.path("back")))
        # checkpoint_inspect agrees: nothing differs, across formats too, and the titan step verifies.
        for other in ("back", "titan"):
            proc = subprocess.run([INSPECT, "--json", f"--diff={self.path(other)}",
                                   self.path("hf")], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertTrue(json.loads(proc.stdout)["diff"]["identical"])
        report = json.loads(run([INSPECT, "--json", "--verify", self.path("titan")]).stdout)
        self.assertEqual(report["format"], "titan")
        self.assertTrue(report["verify"]["ok"])
        self.assertEqual(report["total_tensors"], titan["tensors"])
        return titan, back

    def test_sharded_fp32_round_trip_is_bitwise_identical(self):
        self.save_hf(small_config(), torch.float32, max_shard_size="40KB")
        self.assertGreater(len(glob.glob(self.path("hf/model-*-of-*.safetensors"))), 2)
        titan, back = self.round_trip("--max_shard_size=40KB")
        self.assertEqual(titan["output"], self.path("titan/step-0"))
        self.assertEqual(titan["tensors"], 2 * 9 + 3)
        self.assertGreater(back["peak_rss_bytes"], 0)
        shards = glob.glob(self.path("back/model-*-of-*.safetensors"))
        self.assertGreater(len(shards), 2)
        with open(self.path("back/model.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(set(index["weight_map"].values()), {os.path.basename(s) for s in shards})
        self.assertEqual(index["metadata"]["total_size"], back["bytes"])

    def test_tied_bf16_round_trip_is_bitwise_identical(self):
        self.save_hf(small_config(tie_word_embeddings=True), torch.bfloat16)
        titan, _ = self.round_trip()
        with open(os.path.join(titan["output"], "manifest.json")) as f:
            manifest = json.load(f)
        names = [t["name"] for t in manifest["tensors"]]
        self.assertNotIn("output.weight", names)
        self.assertEqual({t["dtype"] for t in manifest["tensors"]}, {"BF16"})
        self.assertTrue(manifest["state"]["model"]["args"]["tie_word_embeddings"])

    def test_pytorch_bin_folders_read_as_their_safetensors(self):
        # fp32 in one pytorch_model.bin, and bf16 tied in shards with their index (the head saved
        # over the embedding's storage, as transformers 4 kept it), each as plain dicts and as
        # torch.save(model.state_dict())'s OrderedDicts: titan reads the tensors the safetensors
        # save holds, and converts and inspects the folder as it does that one.
        for name, config, dtype, shard_size, ordered in [
                ("single", small_config(), torch.float32, "50GB", False),
                ("sharded", small_config(tie_word_embeddings=True), torch.bfloat16, "20KB", False),
                ("single_ordered", small_config(), torch.float32, "50GB", True),
                ("sharded_ordered", small_config(tie_word_embeddings=True), torch.bfloat16, "20KB",
                 True)]:
            with self.subTest(name):
                shutil.rmtree(self.tmp)
                os.makedirs(self.tmp)
                model = self.save_hf(config, dtype)
                save_pytorch_bin(model, self.path("bin"), shard_size, ordered)
                bins = glob.glob(self.path("bin/pytorch_model*.bin"))
                self.assertEqual(len(bins) > 2, name.startswith("sharded"), bins)
                self.assertEqual(all(type(torch.load(b, weights_only=True)) is
                                     collections.OrderedDict for b in bins), ordered)
                # The reference is a folder transformers reads as the model saved.
                loaded = transformers.LlamaForCausalLM.from_pretrained(self.path("bin"),
                                                                       dtype=dtype).state_dict()
                for key, tensor in model.state_dict().items():
                    self.assertTrue(torch.equal(tensor, loaded[key]), key)
                for to in ("titan", "hf"):
                    for source in ("hf", "bin"):
                        convert(CONVERT, self.path(source), self.path(f"{to}_from_{source}"),
                                f"--to={to}", *(["--from=hf"] if source == "bin" else []))
                    self.assertEqual(folder_files(self.path(f"{to}_from_bin")),
                                     folder_files(self.path(f"{to}_from_hf")), to)
                proc = subprocess.run([INSPECT, "--json", f"--diff={self.path('hf')}",
                                       self.path("bin")], capture_output=True, text=True)
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.assertTrue(json.loads(proc.stdout)["diff"]["identical"])
                reports = {source: json.loads(run([INSPECT, "--json", "--verify", "--stats",
                                                   self.path(source)]).stdout)
                           for source in ("hf", "bin")}
                self.assertTrue(reports["bin"]["verify"]["ok"], reports["bin"]["verify"])
                stats = {source: {t["name"]: t for t in reports[source]["tensors"]}
                         for source in reports}
                # The .bin keeps the tied head transformers drops from safetensors.
                self.assertEqual(set(stats["bin"]) - set(stats["hf"]),
                                 {"lm_head.weight"} if name.startswith("sharded") else set())
                for tensor, entry in stats["hf"].items():
                    self.assertEqual(entry["stats"], stats["bin"][tensor]["stats"], tensor)
                    self.assertEqual(entry["shape"], stats["bin"][tensor]["shape"], tensor)

    def test_pytorch_bin_that_would_run_code_is_refused_running_nothing(self):
        # A pickle calling os.system is refused before anything runs, as damage naming the file;
        # torch.save's legacy format (before PyTorch 1.6) is refused naming the file too.
        marker = self.path("ran")

        class RunsCode:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        model = self.save_hf(small_config(), torch.float32)
        save_pytorch_bin(model, self.path("bin"))
        weights = self.path("bin/pytorch_model.bin")
        state = torch.load(weights, weights_only=True)
        torch.save({**state, "model.extra": RunsCode()}, weights)
        refused = (f"{weights}: not a torch.save state dict of tensors: data.pkl: byte ",
                   ": GLOBAL posix.system: expected a global of a dict of tensors")
        proc = subprocess.run([CONVERT, self.path("bin"), self.path("out")], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        for part in refused:
            self.assertIn(part, proc.stderr)
        self.assertFalse(os.path.exists(self.path("out")))
        proc = subprocess.run([INSPECT, "--json", "--verify", self.path("bin")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        damaged = json.loads(proc.stdout)["damaged"]
        self.assertEqual(len(damaged), 1, damaged)
        for part in refused:
            self.assertIn(part, damaged[0])
        self.assertFalse(os.path.exists(marker))
        torch.load(weights, weights_only=False)  # What Python's unrestricted unpickler does.
        self.assertTrue(os.path.exists(marker))

        torch.save(state, weights, _use_new_zipfile_serialization=False)
        proc = subprocess.run([CONVERT, self.path("bin"), self.path("out")], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(f"{weights}: torch.save's legacy format (PyTorch before 1.6, not a zip "
                      "archive), which titan does not read", proc.stderr)

        # A state dict nested in the dict (a training checkpoint's {"model": ...}): an OrderedDict
        # below the top, which LibTorch's unpickler builds as None; said so, with the way out.
        torch.save({"model": collections.OrderedDict(state)}, weights)
        proc = subprocess.run([CONVERT, self.path("bin"), self.path("out")], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(f"{weights}: not a torch.save state dict of tensors: data.pkl: byte ",
                      proc.stderr)
        self.assertIn(": fills a collections.OrderedDict other than the top-level one (a state "
                      "dict nested in the dict, as torch.save({\"model\": model.state_dict()}) "
                      "writes it), which titan does not read: torch.save the state dict itself",
                      proc.stderr)

    def test_generation_settings_and_chat_template_reach_the_export(self):
        # What titan does not model travels verbatim: generate() samples as the authors set, and
        # the chat template saved beside the tokenizer (chat_template.jinja) is kept.
        self.save_hf(small_config(pad_token_id=95), torch.float32)
        transformers.GenerationConfig(bos_token_id=1, eos_token_id=[2, 3], pad_token_id=95,
                                      do_sample=True, temperature=0.6, top_p=0.95,
                                      top_k=20).save_pretrained(self.path("hf"))
        self.save_tokenizer(self.path("tok"))
        self.assertIn("chat_template.jinja", os.listdir(self.path("tok")))
        _, back = self.round_trip(f"--tokenizer_dir={self.path('tok')}")
        direct = convert(CONVERT, self.path("hf"), self.path("direct"), "--to=hf")
        self.assertIn("chat_template.jinja", back["files"])
        messages = [{"role": "user", "content": "w5 w6"}]
        for out in ("back", "direct"):
            self.assertEqual(transformers.AutoConfig.from_pretrained(self.path(out)).pad_token_id,
                             95)
            self.assertEqual(
                transformers.GenerationConfig.from_pretrained(self.path(out)).to_diff_dict(),
                transformers.GenerationConfig.from_pretrained(self.path("hf")).to_diff_dict())
        tokenizer = transformers.AutoTokenizer.from_pretrained(self.path("back"))
        self.assertEqual(tokenizer.apply_chat_template(messages, tokenize=False), "[user] w5 w6")

    def save_tokenizer(self, folder):
        """A word-level tokenizer with a chat template, saved by transformers."""
        from tokenizers import Tokenizer, models, pre_tokenizers
        vocab = {f"w{i}": i for i in range(3, 96)}
        vocab.update({"<unk>": 0, "<s>": 1, "</s>": 2})
        backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
        tokenizer.chat_template = \
            "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
        tokenizer.save_pretrained(folder)

    def test_titan_export_matches_transformers_logits(self):
        logits_path = self.path("titan_logits.safetensors")
        run([MAKE_TITAN, f"--checkpoint_dir={self.path('titan')}", f"--logits={logits_path}"])
        summary = convert(CONVERT, self.path("titan"), self.path("hf"), "--from=titan", "--to=hf")
        self.assertEqual(summary["input"], self.path("titan/step-3"))
        reference = load_file(logits_path)
        model = transformers.LlamaForCausalLM.from_pretrained(self.path("hf"),
                                                              dtype=torch.float32)
        model.eval()
        self.assertEqual(model.config.rope_scaling["rope_type"], "llama3")
        with torch.no_grad():
            logits = model(reference["tokens"]).logits
        diff = (logits - reference["logits"]).abs().max().item()
        print(f"max |logit difference| titan vs transformers: {diff:.3g}", file=sys.stderr)
        # fp32 throughout; attention and RoPE sum in different orders (interleaved vs rotate-half
        # pairs, SDPA kernels), so agreement is to rounding, not bitwise.
        self.assertLess(diff, 1e-4)
        self.assertGreater(reference["logits"].abs().max().item(), 0.1)

        # A changed weight is reported with its size, and the exit status says so.
        tensors = load_file(self.path("hf/model.safetensors"))
        tensors["model.norm.weight"][5] += 0.25
        os.makedirs(self.path("edited"))
        shutil.copy(self.path("hf/config.json"), self.path("edited"))
        save_file(tensors, self.path("edited/model.safetensors"), metadata={"format": "pt"})
        proc = subprocess.run([INSPECT, "--json", f"--diff={self.path('edited')}",
                               self.path("hf")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        different = json.loads(proc.stdout)["diff"]["different"]
        self.assertEqual([d["name"] for d in different], ["model.norm.weight"])
        self.assertAlmostEqual(different[0]["max_abs_diff"], 0.25, places=5)

    def test_meta_export_and_import(self):
        # params.json cannot say original_max_position_embeddings 32: refused, nothing written.
        self.save_hf(small_config(), torch.bfloat16)
        proc = subprocess.run([CONVERT, "--to=meta", self.path("hf"), self.path("meta")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("original_max_position_embeddings 32: its use_scaled_rope true means",
                      proc.stderr)
        self.assertFalse(os.path.exists(self.path("meta")))
        shutil.rmtree(self.path("hf"))
        original = self.save_hf(small_config(rope_scaling=META_ROPE_SCALING), torch.bfloat16)
        convert(CONVERT, self.path("hf"), self.path("meta"), "--from=hf", "--to=meta")
        with open(self.path("meta/params.json")) as f:
            params = json.load(f)
        self.assertEqual((params["dim"], params["n_kv_heads"], params["use_scaled_rope"]),
                         (64, 2, True))
        # Loads with PyTorch's default restricted unpickler, nothing allowlisted.
        state = torch.load(self.path("meta/consolidated.00.pth"), weights_only=True)
        hf = original.state_dict()
        # The Meta layout, as transformers' convert script inverts it: interleaved RoPE pairs.
        def unpermute(w, heads):
            return w.view(heads, 2, w.shape[0] // heads // 2, w.shape[1]).transpose(1, 2).reshape(w.shape)
        self.assertTrue(torch.equal(state["layers.1.attention.wq.weight"],
                                    unpermute(hf["model.layers.1.self_attn.q_proj.weight"], 4)))
        self.assertTrue(torch.equal(state["layers.0.attention.wk.weight"],
                                    unpermute(hf["model.layers.0.self_attn.k_proj.weight"], 2)))
        self.assertTrue(torch.equal(state["layers.0.feed_forward.w1.weight"],
                                    hf["model.layers.0.mlp.gate_proj.weight"]))
        self.assertEqual(state["tok_embeddings.weight"].dtype, torch.bfloat16)
        self.assertEqual(len(state), 2 * 9 + 3)
        # Meta -> HF gives back the original tensors.
        convert(CONVERT, self.path("meta"), self.path("back"), "--from=meta", "--to=hf")
        back = hf_tensors(self.path("back"))
        for name, tensor in hf_tensors(self.path("hf")).items():
            self.assertTrue(torch.equal(tensor, back[name]), name)

    def test_tied_meta_round_trip_is_bitwise_identical(self):
        original = self.save_hf(small_config(tie_word_embeddings=True,
                                             rope_scaling=META_ROPE_SCALING), torch.bfloat16)
        convert(CONVERT, self.path("hf"), self.path("meta"), "--from=hf", "--to=meta")
        # Meta's tied checkpoints (Llama 3.2 1B, 3B) hold the head as a copy of the embedding.
        state = torch.load(self.path("meta/consolidated.00.pth"), weights_only=True)
        self.assertTrue(torch.equal(state["output.weight"], state["tok_embeddings.weight"]))
        convert(CONVERT, self.path("meta"), self.path("back"), "--from=meta", "--to=hf")
        original_tensors, back = hf_tensors(self.path("hf")), hf_tensors(self.path("back"))
        self.assertEqual(sorted(original_tensors), sorted(back))
        for name, tensor in original_tensors.items():
            self.assertTrue(torch.equal(tensor.view(torch.uint8), back[name].view(torch.uint8)),
                            name)
        model = transformers.LlamaForCausalLM.from_pretrained(self.path("back"),
                                                              dtype=torch.bfloat16)
        self.assertTrue(model.config.tie_word_embeddings)
        tokens = torch.tensor([[1, 5, 9, 3]])
        with torch.no_grad():
            self.assertTrue(torch.equal(model(tokens).logits, original(tokens).logits))

    def test_meta_pickle_cannot_run_code(self):
        os.makedirs(self.path("evil"))
        marker = self.path("marker")

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        torch.save({"tok_embeddings.weight": torch.zeros(2, 2), "x": Evil()},
                   self.path("evil/consolidated.00.pth"))
        with open(self.path("evil/params.json"), "w") as f:
            json.dump({"dim": 2, "n_layers": 1, "n_heads": 1, "vocab_size": 2}, f)
        proc = subprocess.run([CONVERT, "--from=meta", "--to=hf", self.path("evil"),
                               self.path("out")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("consolidated.00.pth: not a torch.save state dict of tensors", proc.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_flags_of_other_outputs_are_refused(self):
        self.save_hf(small_config(), torch.float32)
        for flags, error in [(["--to=hf", "--step=5"], "--step applies to --to=titan only"),
                             (["--to=titan", "--max_shard_size=1KB"],
                              "--max_shard_size applies to --to=hf only"),
                             (["--to=titan", "--step=-5"], "--step: -5, expected a step >= 0"),
                             (["--to=hf", "--max_shard_size=0"], "--max_shard_size: size \"0\"")]:
            proc = subprocess.run([CONVERT, "--from=hf", *flags, self.path("hf"), self.path("out")],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 1, flags)
            self.assertIn(error, proc.stderr, flags)
            self.assertFalse(os.path.exists(self.path("out")), flags)
        summary = convert(CONVERT, self.path("hf"), self.path("out"), "--to=titan", "--step=7")
        self.assertEqual(summary["output"], self.path("out/step-7"))

    def test_stopped_or_failed_conversions_leave_nothing(self):
        # One shard per tensor (147, each synced), or one 76 MB shard (checked after each tensor
        # written): still writing when the signal comes.
        self.save_hf(small_config(vocab_size=4096, hidden_size=256, intermediate_size=1024,
                                  num_hidden_layers=16), torch.float32)
        for sig, shard_flags, written in ((signal.SIGINT, ["--max_shard_size=1KB"], "model-*"),
                                          (signal.SIGTERM, ["--max_shard_size=1KB"], "model-*"),
                                          (signal.SIGINT, [], "model.safetensors.tmp.*")):
            out = self.path(f"out_{sig.name}_{len(shard_flags)}")
            proc = subprocess.Popen([CONVERT, "--to=hf", *shard_flags, self.path("hf"), out],
                                    stderr=subprocess.PIPE, text=True)
            temporary = f"{out}.tmp-{proc.pid}"
            while proc.poll() is None and not glob.glob(os.path.join(temporary, written)):
                time.sleep(0.001)
            proc.send_signal(sig)
            _, stderr = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 128 + sig, stderr)
            self.assertIn(f"stopped by signal {int(sig)}", stderr)
            self.assertEqual(glob.glob(out + "*"), [])
        os.makedirs(self.path("no_tokenizer"))
        proc = subprocess.run([CONVERT, "--to=hf", f"--tokenizer_dir={self.path('no_tokenizer')}",
                               self.path("hf"), self.path("out")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("no_tokenizer: none of tokenizer.json", proc.stderr)
        self.assertFalse(os.path.exists(self.path("out")))

    def test_a_conversion_past_the_file_size_limit_fails_and_leaves_nothing(self):
        # `ulimit -f` (64 KiB; the model's fp32 file holds 400 KB) fails the write with EFBIG, which
        # is reported as a full disk is, instead of SIGXFSZ killing the tool mid-write.
        self.save_hf(small_config(rope_scaling=META_ROPE_SCALING), torch.float32)
        convert(CONVERT, self.path("hf"), self.path("titan"), "--from=hf", "--to=titan")

        def limit_file_size():
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

        for src, to in (("hf", "titan"), ("titan", "hf"), ("titan", "meta")):
            with self.subTest(to=to):
                out = self.path(f"limited_{to}")
                proc = subprocess.run([CONVERT, f"--to={to}", self.path(src), out],
                                      capture_output=True, text=True, timeout=300,
                                      preexec_fn=limit_file_size)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertRegex(proc.stderr.splitlines()[-1],
                                 f"^convert_checkpoint: {out}.*: write failed: File too large$")
                self.assertEqual(glob.glob(out + "*"), [])

    def run_into_closed_pipe(self, *args):
        """convert_checkpoint with stdout and stderr a pipe nobody reads (`2>&1 | true`)."""
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            return subprocess.run([CONVERT, *args], stdout=write_end, stderr=write_end,
                                  timeout=300).returncode
        finally:
            os.close(write_end)

    def test_a_reader_gone_neither_kills_a_conversion_nor_keeps_a_lost_summary(self):
        # Its log lines then fail harmlessly: SIGPIPE would kill it mid-export, leaving OUT and
        # OUT.tmp-PID. A lost --json summary fails it, leaving nothing.
        self.save_hf(small_config(rope_scaling=META_ROPE_SCALING), torch.float32)
        for to in ("hf", "titan", "meta"):
            with self.subTest(to=to):
                out = self.path(f"piped_{to}")
                self.assertEqual(self.run_into_closed_pipe(f"--to={to}", self.path("hf"), out), 0)
                self.assertEqual(glob.glob(out + "*"), [out])
                proc = subprocess.run([INSPECT, out], capture_output=True, text=True)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                lost = self.path(f"lost_{to}")
                self.assertEqual(
                    self.run_into_closed_pipe("--json", f"--to={to}", self.path("hf"), lost), 1)
                self.assertEqual(glob.glob(lost + "*"), [])

    def test_a_summary_lost_to_a_full_disk_leaves_no_output(self):
        # The --json summary is written once OUT is in place, and a lost one takes OUT away again:
        # exit 1 means no OUT, and an empty OUT given is left empty, so that a rerun is not refused.
        self.save_hf(small_config(rope_scaling=META_ROPE_SCALING), torch.float32)
        for to in ("hf", "titan", "meta"):
            for existed in (False, True):
                with self.subTest(to=to, existed=existed), open("/dev/full", "w") as full:
                    out = self.path(f"full_{to}_{existed}")
                    if existed:
                        os.makedirs(out)
                    proc = subprocess.run([CONVERT, "--json", f"--to={to}", self.path("hf"), out],
                                          stdout=full, stderr=subprocess.PIPE, text=True,
                                          timeout=300)
                    self.assertEqual(proc.returncode, 1, proc.stderr)
                    self.assertEqual(proc.stderr.splitlines()[-1],
                                     "convert_checkpoint: stdout: write failed: "
                                     "No space left on device")
                    self.assertEqual(glob.glob(out + "*"), [out] if existed else [])
                    if existed:
                        self.assertEqual(os.listdir(out), [])
                    convert(CONVERT, self.path("hf"), out, f"--to={to}")  # the rerun succeeds

    def test_a_failed_rename_into_place_prints_no_summary(self):
        # A file put into OUT (the empty folder the conversion holds) while the export is in its
        # temporary, as by a process that ignores the lock, fails the rename onto OUT: --json
        # prints the error alone (no success summary before it), exit 1, nothing left.
        self.save_hf(small_config(vocab_size=4096, hidden_size=256, intermediate_size=1024,
                                  num_hidden_layers=16), torch.float32)
        out = self.path("intruded")
        proc = subprocess.Popen([CONVERT, "--json", "--to=hf", "--max_shard_size=1KB",
                                 self.path("hf"), out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        temporary = f"{out}.tmp-{proc.pid}"
        while proc.poll() is None and not glob.glob(os.path.join(temporary, "model-*")):
            time.sleep(0.001)
        proc.send_signal(signal.SIGSTOP)
        try:
            while True:  # stopped for sure: state T in /proc/PID/stat
                with open(f"/proc/{proc.pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        break
            # Not renamed yet (the rename takes the temporary away in one step).
            self.assertTrue(os.path.isdir(temporary))
            open(os.path.join(out, "intruder"), "w").close()
        finally:
            proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 1, stderr)
        error = json.loads(stdout)  # one object: the error
        self.assertEqual(list(error), ["error"], stdout)
        prefix = f"{temporary}: rename to {out} failed: "
        self.assertTrue(error["error"].startswith(prefix), error)
        self.assertIn(error["error"][len(prefix):], ("Directory not empty", "File exists"))
        self.assertEqual(glob.glob(out + "*"), [])

    def test_inspect_refuses_tolerances_it_cannot_use(self):
        self.save_hf(small_config(), torch.float32)
        for flags, error in [(["--rtol=0.1"], "--rtol applies to --diff only"),
                             (["--atol=0.1"], "--atol applies to --diff only"),
                             ([f"--diff={self.path('hf')}", "--rtol=-1"],
                              "--rtol: -1, expected a tolerance >= 0")]:
            proc = subprocess.run([INSPECT, *flags, self.path("hf")], capture_output=True,
                                  text=True)
            self.assertEqual(proc.returncode, 2, flags)  # trouble, not a difference
            self.assertIn(error, proc.stderr, flags)
            self.assertEqual(proc.stdout, "", flags)

    def test_errors_are_clear(self):
        proc = subprocess.run([CONVERT, "--from=hf", "--to=titan", self.path("missing"),
                               self.path("out")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("missing/config.json", proc.stderr)
        proc = subprocess.run([CONVERT, "--to=xla", "a", "b"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn('checkpoint format "xla", expected titan, hf or meta', proc.stderr)
        # An empty path ("$UNSET") is named, not read as the root or the working directory.
        for args, which in ((["", "b"], "IN"), (["a", ""], "OUT")):
            proc = subprocess.run([CONVERT, *args], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 1)
            self.assertIn(f"{which}: expected a checkpoint path, got an empty string", proc.stderr)
        # With --json a failure is JSON on stdout too; checkpoint_inspect's is 2, as diff's trouble.
        for command, code in (
                ([CONVERT, "--from=hf", "--to=titan", self.path("missing"), self.path("out")], 1),
                ([INSPECT, self.path("missing")], 2)):
            proc = subprocess.run([*command, "--json"], capture_output=True, text=True)
            self.assertEqual(proc.returncode, code)
            self.assertIn("missing", json.loads(proc.stdout)["error"])

    def test_inspect_exits_as_diff_does(self):
        # 0 the same, 1 different (test_titan_export_matches_transformers_logits), 2 trouble: a
        # checkpoint it cannot read, a flag gflags refuses, or a missing PATH.
        self.save_hf(small_config(), torch.float32)
        hf = self.path("hf")
        proc = subprocess.run([INSPECT, f"--diff={hf}", hf], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # A problem --verify finds is a finding too: 1.
        convert(CONVERT, hf, self.path("titan"), "--to=titan")
        shard = glob.glob(self.path("titan/step-0/*.safetensors"))[0]
        with open(shard, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 1]))
        proc = subprocess.run([INSPECT, "--verify", self.path("titan")], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        for args, error in [([f"--diff={self.path('missing')}", "--json", hf], "missing"),
                            ([f"--diff={hf}", "--rtool=0.1", hf], "unknown command line flag"),
                            ([f"--diff={hf}", "--rtol=abc", hf], "illegal value 'abc'"),
                            ([f"--diff={hf}"], "expected one PATH, got 0")]:
            proc = subprocess.run([INSPECT, *args], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2, args)
            self.assertIn(error, proc.stderr, args)

    def test_json_of_a_path_that_is_not_utf8(self):
        # Paths are bytes: --json spells the ill-formed ones as U+FFFD instead of aborting (nlohmann's
        # dump throws on them), and the conversion's exit status stands.
        self.save_hf(small_config(), torch.float32)
        out = os.fsencode(self.path("out")) + b"\xe9"
        proc = subprocess.run([CONVERT, "--json", "--to=titan", self.path("hf"), out],
                              capture_output=True, text=True, errors="replace")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["output"], self.path("out") + "\ufffd/step-0")
        for args in ([out], [b"--diff=" + out, self.path("hf")]):
            proc = subprocess.run([INSPECT, "--json", *args], capture_output=True, text=True,
                                  errors="replace")
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("format", json.loads(proc.stdout))

    def test_inspect_refuses_an_empty_path(self):
        # An unset variable ("$DIR", --diff="$OTHER") names no checkpoint: trouble, not a listing or
        # "identical".
        self.save_hf(small_config(), torch.float32)
        hf = self.path("hf")
        empty = "expected a checkpoint path, got an empty one"
        for args, error in [([""], empty), (["--diff=", hf], f"--diff: {empty}"),
                            (["--diff", "", hf], f"--diff: {empty}")]:
            proc = subprocess.run([INSPECT, *args], capture_output=True, text=True)
            self.assertEqual((proc.returncode, proc.stdout), (2, ""), args)
            self.assertEqual(proc.stderr, f"checkpoint_inspect: {error}\n", args)
            proc = subprocess.run([INSPECT, "--json", *args], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2, args)
            self.assertEqual(json.loads(proc.stdout), {"error": error}, args)

    def test_inspect_stats_match_torch(self):
        # std as torch.std (Bessel's correction), the reference a user checks --stats against.
        self.save_hf(small_config(), torch.float32)
        report = json.loads(run([INSPECT, "--json", "--stats", self.path("hf")]).stdout)
        tensors = hf_tensors(self.path("hf"))
        self.assertEqual(len(report["tensors"]), len(tensors))
        for entry in report["tensors"]:
            tensor, stats = tensors[entry["name"]].double(), entry["stats"]
            for key, expected in (("min", tensor.min()), ("max", tensor.max()),
                                  ("mean", tensor.mean()), ("std", tensor.std())):
                # float64 sums in another order: agreement to rounding.
                self.assertAlmostEqual(stats[key], expected.item(), delta=1e-12, msg=entry["name"])

    def test_inspect_diff_takes_a_tied_heads_copy_for_the_tie(self):
        # Older writers saved a tied head as a copy of the embedding; transformers loads that folder
        # as it loads its titan -> HF export, which has no lm_head.weight: not a difference.
        self.save_hf(small_config(tie_word_embeddings=True), torch.bfloat16)
        weights = self.path("hf/model.safetensors")
        tensors = load_file(weights)
        self.assertNotIn("lm_head.weight", tensors)
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        save_file(tensors, weights, metadata={"format": "pt"})
        convert(CONVERT, self.path("hf"), self.path("titan"), "--to=titan")
        convert(CONVERT, self.path("titan"), self.path("export"), "--to=hf")
        self.assertNotIn("lm_head.weight", hf_tensors(self.path("export")))
        proc = subprocess.run([INSPECT, f"--diff={self.path('export')}", self.path("hf")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(": identical\n  note: lm_head.weight in the first equals "
                      "model.embed_tokens.weight bitwise: the tie its config.json declares",
                      proc.stdout)

    def test_inspect_names_a_damaged_file_as_a_finding(self):
        # A truncated file is what --verify checks for: 1 with the file named, and the tensors the
        # manifest lists still described, --verify or not; convert refuses the damaged model file.
        self.save_hf(small_config(), torch.float32)
        titan = convert(CONVERT, self.path("hf"), self.path("titan"), "--to=titan")
        model = self.path("titan/step-0/model.safetensors")
        os.truncate(model, 1000)
        for flags in ([], ["--verify"]):
            proc = subprocess.run([INSPECT, "--json", *flags, self.path("titan")],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            report = json.loads(proc.stdout)
            self.assertEqual(report["total_tensors"], titan["tensors"])
            self.assertIn(model, report["damaged"][0])
            if flags:
                self.assertIn(model, report["verify"]["problems"][0])
        proc = subprocess.run([INSPECT, self.path("titan")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("damaged: 1 file(s)\n    " + model, proc.stdout)
        proc = subprocess.run([CONVERT, "--to=hf", self.path("titan"), self.path("out")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(model, proc.stderr)

    def test_inspect_verify_names_a_damaged_hf_folder_as_a_finding(self):
        # Under --verify an index that disagrees with the shards, a missing shard or a truncated
        # file is damage found (1, each listed), as a truncated titan file is; without it such a
        # folder is one it cannot read (2), as before.
        self.save_hf(small_config(), torch.float32)
        shutil.move(self.path("hf"), self.path("single"))
        self.save_hf(small_config(), torch.float32, max_shard_size="50KB")
        with open(self.path("hf/model.safetensors.index.json")) as f:
            weight_map = json.load(f)["weight_map"]
        norm_shard = weight_map["model.norm.weight"]
        first_shard = sorted(set(weight_map.values()))[0]
        self.assertNotEqual(norm_shard, first_shard)

        def edit_index(edit):
            def apply(folder):
                index_path = os.path.join(folder, "model.safetensors.index.json")
                with open(index_path) as f:
                    index = json.load(f)
                edit(index["weight_map"])
                with open(index_path, "w") as f:
                    json.dump(index, f)
            return apply

        def copy_norm_into_first_shard(folder):
            tensors = load_file(os.path.join(folder, first_shard))
            tensors["model.norm.weight"] = load_file(os.path.join(folder, norm_shard))[
                "model.norm.weight"]
            save_file(tensors, os.path.join(folder, first_shard), metadata={"format": "pt"})

        cases = [
            ("wrong_shard", "hf",
             edit_index(lambda w: w.update({"model.norm.weight": first_shard})),
             f"tensor 'model.norm.weight' is in {norm_shard}, the index says {first_shard}"),
            ("unindexed", "hf", edit_index(lambda w: w.pop("model.norm.weight")),
             f"tensor 'model.norm.weight' is in {norm_shard}, the index says nothing"),
            ("phantom", "hf", edit_index(lambda w: w.update({"model.extra.weight": first_shard})),
             f"tensor 'model.extra.weight' is missing from {first_shard}"),
            ("duplicate", "hf", copy_norm_into_first_shard,
             f"{norm_shard}: tensor 'model.norm.weight' also appears in {first_shard}"),
            ("missing_shard", "hf", lambda folder: os.remove(os.path.join(folder, norm_shard)),
             f"{norm_shard}: open failed: No such file or directory"),
            ("truncated", "single",
             lambda folder: os.truncate(os.path.join(folder, "model.safetensors"), 1000),
             "model.safetensors: invalid safetensors file"),
        ]
        for name, source, damage, problem in cases:
            with self.subTest(name):
                folder = self.path(name)
                shutil.copytree(self.path(source), folder)
                damage(folder)
                proc = subprocess.run([INSPECT, "--json", "--verify", folder], capture_output=True,
                                      text=True)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                report = json.loads(proc.stdout)
                self.assertFalse(report["verify"]["ok"])
                self.assertIn(problem, report["verify"]["problems"][0])
                # The model is config.json's, not unknown for the tensors a damaged file hid.
                self.assertEqual(report["model"], "llama3", report["model_unknown_reason"])
                proc = subprocess.run([INSPECT, "--verify", folder], capture_output=True,
                                      text=True)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertIn("  verify: ", proc.stdout)
                self.assertIn(problem, proc.stdout)
                proc = subprocess.run([INSPECT, folder], capture_output=True, text=True)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(problem, proc.stderr)

    def test_json_to_a_full_disk_fails(self):
        # The conversion is done, but its summary is lost: the tools say so, as coreutils do.
        self.save_hf(small_config(), torch.float32)
        for tool, args in [(CONVERT, ["--to=titan", self.path("hf"), self.path("titan")]),
                           (INSPECT, ["--stats", self.path("hf")])]:
            with open("/dev/full", "w") as full:
                proc = subprocess.run([tool, "--json", *args], stdout=full, stderr=subprocess.PIPE,
                                      text=True)
            self.assertEqual(proc.returncode, 2 if tool == INSPECT else 1, proc.stderr)
            self.assertEqual(proc.stderr.splitlines()[-1],
                             f"{os.path.basename(tool)}: stdout: write failed: No space left on "
                             "device")

    def test_help_lists_the_tools_own_flags_and_exits_zero(self):
        for tool, flags in [(CONVERT, ["--from", "--max_shard_size", "--json"]),
                            (INSPECT, ["--stats", "--verify", "--rtol"])]:
            for spelling in ("--help", "-h"):
                proc = subprocess.run([tool, spelling], capture_output=True, text=True)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertTrue(proc.stdout.startswith(os.path.basename(tool) + " "), proc.stdout)
                for flag in flags:
                    self.assertIn(f"  {flag} (", proc.stdout)
                self.assertNotIn("alsologtoemail", proc.stdout)  # glog's flags stay out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--convert_checkpoint", required=True)
    parser.add_argument("--make_titan_checkpoint", required=True)
    parser.add_argument("--checkpoint_inspect", required=True)
    args, rest = parser.parse_known_args()
    CONVERT = os.path.abspath(args.convert_checkpoint)
    MAKE_TITAN = os.path.abspath(args.make_titan_checkpoint)
    INSPECT = os.path.abspath(args.checkpoint_inspect)
    unittest.main(argv=[sys.argv[0], *rest])
