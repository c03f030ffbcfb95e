"""A LLaMA-2 decode step, written as the public Hugging Face code writes it, captured with dynamic shapes.

The small-shape row of docs/feature-docs.md#host-scheduling measures LLaMA2 under GE host scheduling: its 650+
Pack/Gather/Concat ops are the size computations of a dynamic-shape graph. Here they are not counted by hand: the step
is captured by ``torch.compile`` with the KV length symbolic (parameters on the meta device, so a 7B model costs no
memory), and capture adds GE's size kernels wherever the graph computes or passes a symbolic size
(``pytest_npufuse/frontend/ge_shapes.py``). ``captured_llama`` memoises the capture per size.

Two public variants of the layer: grouped KV heads (``kv_heads``, repeated to the query heads as the Hugging
Face code's ``repeat_kv`` does: LLaMA-2 70B and 34B, openPangu) with the projections' bias openPangu's config
turns on (``bias``), and W8A8 linears (``quant``) as Ascend's own LLaMA-2 quantisation writes them
(Ascend/torchair ``npu_tuned_model/llm/llama/quantization``, docs/sources.md#w8a8-llama): the activation quantised
by ``npu_quantize`` before the fused QKV projection, the output projection, the MLP's input and its down
projection, each linear an ``npu_quant_matmul`` of int8 by int8 with an int64 dequantisation scale and an
int32 bias, producing float16.
"""

from __future__ import annotations

import functools
import math

import torch

from pytest_npufuse import capture
from pytest_npufuse import torch_npu

META = torch.device("meta")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[b, kv_heads, s, d] -> [b, kv_heads * groups, s, d], as the Hugging Face LLaMA code repeats grouped heads."""
    if groups == 1:
        return x
    b, heads, s, d = x.shape
    return x[:, :, None].expand(b, heads, groups, s, d).reshape(b, heads * groups, s, d)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=torch.float16, device=META))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + 1e-5)).to(x.dtype)


class QuantLinear(torch.nn.Module):
    """A W8A8 linear: int8 activations by an int8 [out, in] weight through ``npu_quant_matmul``, per-channel
    int64 dequantisation scale and int32 bias, float16 out (the call Ascend/torchair's A8W8 LLaMA makes)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.outputs = outputs
        self.register_buffer("weight", torch.ones(outputs, inputs, dtype=torch.int8, device=META))
        self.register_buffer("deq_scale", torch.ones(outputs, dtype=torch.int64, device=META))
        self.register_buffer("bias", torch.ones(outputs, dtype=torch.int32, device=META))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.view(-1, x.size(-1))
        y = torch_npu.npu_quant_matmul(rows, self.weight.transpose(0, 1), self.deq_scale, offset=None, bias=self.bias,
                                       output_dtype=torch.float16)
        return y.view(*x.shape[:-1], self.outputs)


class Quantize(torch.nn.Module):
    """Static per-channel activation quantisation to int8 (``npu_quantize`` with a scale and an int32 offset)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(width, dtype=torch.float32, device=META))
        self.register_buffer("offset", torch.ones(width, dtype=torch.int32, device=META))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_quantize(x, self.scale, self.offset, torch.qint8, axis=-1)


class Attention(torch.nn.Module):
    """Rotary embedding over a growing KV cache: separate float16 projections, or one W8A8 QKV projection."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, bias: bool, quant: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.quant = heads, kv_heads, hidden // heads, quant
        self.widths = (heads * self.dim, kv_heads * self.dim, kv_heads * self.dim)
        if quant:
            self.quant_in, self.quant_out = Quantize(hidden), Quantize(hidden)
            self.qkv, self.o_proj = QuantLinear(hidden, sum(self.widths)), QuantLinear(hidden, hidden)
        else:
            linear = functools.partial(torch.nn.Linear, bias=bias, device=META, dtype=torch.float16)
            self.q_proj, self.k_proj, self.v_proj = (linear(hidden, width) for width in self.widths)
            self.o_proj = linear(hidden, hidden, bias=False)

    def project(self, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.quant:
            return self.qkv(self.quant_in(h)).split(self.widths, dim=-1)
        return self.q_proj(h), self.k_proj(h), self.v_proj(h)

    def forward(self, h, cos, sin, past_k, past_v):
        b, s, hidden = h.shape
        q, k, v = self.project(h)
        q = q.view(b, s, self.heads, self.dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        groups = self.heads // self.kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dim)
        attn = torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)
        attn = attn.transpose(1, 2).reshape(b, s, hidden)
        return self.o_proj(self.quant_out(attn) if self.quant else attn)


class Mlp(torch.nn.Module):
    """SwiGLU: float16 linears, or W8A8 ones with the input and the down projection's input quantised."""

    def __init__(self, hidden: int, ffn: int, quant: bool) -> None:
        super().__init__()
        self.quant = quant
        if quant:
            self.quant_in, self.quant_down = Quantize(hidden), Quantize(ffn)
            self.gate_proj, self.up_proj = QuantLinear(hidden, ffn), QuantLinear(hidden, ffn)
            self.down_proj = QuantLinear(ffn, hidden)
        else:
            linear = functools.partial(torch.nn.Linear, bias=False, device=META, dtype=torch.float16)
            self.gate_proj, self.up_proj, self.down_proj = linear(hidden, ffn), linear(hidden, ffn), linear(ffn, hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.quant:
            h = self.quant_in(h)
            return self.down_proj(self.quant_down(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h)))
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Layer(torch.nn.Module):
    """Attention with rotary embedding over a growing KV cache, then the SwiGLU MLP."""

    def __init__(self, hidden: int, heads: int, ffn: int, kv_heads: int, bias: bool, quant: bool) -> None:
        super().__init__()
        self.self_attn = Attention(hidden, heads, kv_heads, bias, quant)
        self.mlp = Mlp(hidden, ffn, quant)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(hidden), RMSNorm(hidden)

    def forward(self, x, cos, sin, past_k, past_v):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, past_k, past_v)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(torch.nn.Module):
    def __init__(self, hidden: int, layers: int, heads: int, ffn: int, vocab: int, kv_heads: int | None = None,
                 bias: bool = False, quant: bool = False) -> None:
        super().__init__()
        kv_heads = kv_heads or heads
        self.embed_tokens = torch.nn.Embedding(vocab, hidden, device=META, dtype=torch.float16)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, ffn, kv_heads, bias, quant) for _ in range(layers))
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
def captured_llama(hidden: int, layers: int, heads: int, ffn: int, vocab: int, past: int = 512,
                   kv_heads: int | None = None, bias: bool = False, quant: bool = False, batch: int = 1):
    """The program of one decode step (one new token per sequence, ``past`` cached), captured with a symbolic
    KV length; a ``batch`` above 1 is symbolic too, as ``torch.compile(dynamic=True)`` leaves every size
    above 1 (Ascend/torchair's LLaMA-2 examples compile with ``dynamic=True`` and benchmark batch 4)."""
    model = Llama(hidden, layers, heads, ffn, vocab, kv_heads, bias, quant)
    model.inv_freq = model.inv_freq.to(META)
    ids = torch.zeros(batch, 1, dtype=torch.int64, device=META)
    shape = (batch, kv_heads or heads, past, hidden // heads)
    caches = [torch.zeros(shape, dtype=torch.float16, device=META) for _ in range(2 * layers)]
    for tensor in (ids, *caches):
        if batch > 1:
            torch._dynamo.mark_dynamic(tensor, 0)
    for cache in caches:
        torch._dynamo.mark_dynamic(cache, 2)
    return capture(model, ids, *caches)
