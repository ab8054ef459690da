"""Reference for the CPU benchmark: the same Llama 3 debug model and training step as titan_train,
written as an eager PyTorch loop (torchtitan's model code shape), on the same torch build, reading
the same batches (the bundled corpus packed as titan packs it) with the same optimizer settings
(AdamW foreach, weight decay on every parameter, clipping at 1.0).

Prints one JSON line: {"median_tokens_per_second": ..., "median_step_seconds": ...}; a step is
timed from fetching its batch to the optimizer step, as titan_train's per-step tps.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_heads, self.head_dim)
        q, k = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


def rope(x, cos, sin):
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos[: x.shape[1]][None, :, None], sin[: x.shape[1]][None, :, None]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2).type_as(x)


def llama3_scaled(freqs, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original=8192):
    """Llama 3.1's RoPE scaling, which torchtitan's debugmodel inherits (titan's too)."""
    wavelen = 2 * math.pi / freqs
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * freqs / factor + smooth * freqs
    scaled = torch.where(wavelen > original / low_freq_factor, freqs / factor, blended)
    return torch.where(wavelen < original / high_freq_factor, freqs, scaled)


class Block(nn.Module):
    def __init__(self, dim, n_heads, hidden):
        super().__init__()
        self.attention = Attention(dim, n_heads)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, vocab, dim=256, n_layers=6, n_heads=16, hidden=768, max_seq=128):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads, hidden) for _ in range(n_layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // n_heads
        freqs = llama3_scaled(1.0 / (500000.0 ** (torch.arange(0, head_dim, 2).double() / head_dim)))
        angles = torch.outer(torch.arange(max_seq).double(), freqs)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return self.output(self.norm(h))


def packed_windows(corpus, tokenizer_dir, seq_len):
    """Yields titan's windows: each document [BOS] + ids + [EOS], one stream, seq_len + 1 tokens."""
    tokenizer = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json")) as f:
        config = json.load(f)
    bos = tokenizer.token_to_id(config["bos_token"])
    eos = tokenizer.token_to_id(config["eos_token"])
    stream = []
    while True:
        with open(corpus) as f:
            for line in f:
                stream += [bos] + tokenizer.encode(json.loads(line)["text"],
                                                   add_special_tokens=False).ids + [eos]
                while len(stream) >= seq_len + 1:
                    yield stream[:seq_len + 1]
                    stream = stream[seq_len + 1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--corpus", default="assets/default_corpus/train.jsonl")
    parser.add_argument("--tokenizer", default="assets/default_tokenizer")
    args = parser.parse_args()
    torch.manual_seed(0)
    vocab = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json")).get_vocab_size()
    model = Llama(vocab, max_seq=args.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, foreach=True)
    windows = packed_windows(args.corpus, args.tokenizer, args.seq_len)
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        tokens = torch.tensor([next(windows) for _ in range(args.batch)])
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    # The median of the steps' tokens/s, as cpu_step_benchmark.sh takes titan's (same function).
    tokens_per_second = [args.batch * args.seq_len / t for t in times]
    print(json.dumps({"median_tokens_per_second": statistics.median(tokens_per_second),
                      "median_step_seconds": statistics.median(times),
                      "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
