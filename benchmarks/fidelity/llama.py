"""A LLaMA-2 decode step, written as the public Hugging Face code writes it, captured with dynamic shapes.

The small-shape row of docs/feature-docs.md#host-scheduling measures LLaMA2 under GE host scheduling: its 650+
Pack/Gather/Concat ops are the size computations of a dynamic-shape graph. Here they are not counted by hand: the step
is captured by ``torch.compile`` with the KV length symbolic (parameters on the meta device, so a 7B model costs no
memory), and capture adds GE's size kernels wherever the graph computes or passes a symbolic size
(``pytest_npufuse/frontend/ge_shapes.py``). ``captured_llama`` memoises the capture per size.
"""

from __future__ import annotations

import functools
import math

import torch

from pytest_npufuse import capture

META = torch.device("meta")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=torch.float16, device=META))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + 1e-5)).to(x.dtype)


class Layer(torch.nn.Module):
    """Attention with rotary embedding over a growing KV cache, then the SwiGLU MLP."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        linear = functools.partial(torch.nn.Linear, bias=False, device=META, dtype=torch.float16)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (linear(hidden, hidden) for _ in range(4))
        self.gate_proj, self.up_proj, self.down_proj = linear(hidden, ffn), linear(hidden, ffn), linear(ffn, hidden)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(hidden), RMSNorm(hidden)

    def forward(self, x, cos, sin, past_k, past_v):
        b, s, hidden = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.heads, self.dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dim)
        attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, hidden))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(torch.nn.Module):
    def __init__(self, hidden: int, layers: int, heads: int, ffn: int, vocab: int) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, hidden, device=META, dtype=torch.float16)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False, device=META, dtype=torch.float16)
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, hidden // heads, 2, dtype=torch.float32) / (hidden // heads)))

    def forward(self, ids, *caches):
        b, s = ids.shape
        past = caches[0].shape[2]
        positions = torch.arange(past, past + s, device=ids.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq.to(ids.device))
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None, None].to(torch.float16), emb.sin()[None, None].to(torch.float16)
        x = self.embed_tokens(ids)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, caches[2 * index], caches[2 * index + 1])
        return self.lm_head(self.norm(x))


@functools.cache
def captured_llama(hidden: int, layers: int, heads: int, ffn: int, vocab: int, past: int = 512):
    """The program of one decode step (one new token, ``past`` cached), captured with a symbolic KV length."""
    model = Llama(hidden, layers, heads, ffn, vocab)
    model.inv_freq = model.inv_freq.to(META)
    ids = torch.zeros(1, 1, dtype=torch.int64, device=META)
    caches = [torch.zeros(1, heads, past, hidden // heads, dtype=torch.float16, device=META) for _ in range(2 * layers)]
    for cache in caches:
        torch._dynamo.mark_dynamic(cache, 2)
    return capture(model, ids, *caches)
