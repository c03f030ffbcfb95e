"""A small LLaMA-style decoder (dense FFN, no MoE) in TorchAir style, for the scope advisor's cases.

Module names follow the public LLaMA code (``layers.N.self_attn``, ``layers.N.mlp``,
``input_layernorm``, ``post_attention_layernorm``) so the advisor finds the blocks as it would in a real
model. Decode-sized shapes: one new token per sequence against a KV cache. Rotary embedding is written
out in plain torch (rotate-half), as many ports do before switching to the fused RotaryMul.
"""

from __future__ import annotations

import torch

from pytest_npufuse import superkernel_scope, torch_npu

TOKENS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_LEN, INTER = 8, 256, 4, 2, 64, 64, 512


def _param(gen: torch.Generator, *shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[-2] ** 0.5).to(torch.bfloat16))


class RMSNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rms_norm(x, self.weight)[0]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaAttention(torch.nn.Module):
    """Q projection, rotary embedding, fused attention over the KV cache, O projection."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.q_proj = _param(gen, HIDDEN, HEADS * HEAD_DIM)
        self.o_proj = _param(gen, HEADS * HEAD_DIM, HIDDEN)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = (x @ self.q_proj).view(TOKENS, HEADS, HEAD_DIM)
        q = (q * cos + rotate_half(q) * sin).view(TOKENS, 1, HEADS * HEAD_DIM)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, kv, kv, num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BSH", scale=HEAD_DIM**-0.5
        )
        return out.squeeze(1) @ self.o_proj


class LlamaMLP(torch.nn.Module):
    """Gate and up projection in one matmul, SwiGLU, down projection."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.gate_up_proj = _param(gen, HIDDEN, 2 * INTER)
        self.down_proj = _param(gen, INTER, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_swiglu(x @ self.gate_up_proj) @ self.down_proj


class LlamaDecoderLayer(torch.nn.Module):
    def __init__(self, gen: torch.Generator, scope: str | None = None) -> None:
        super().__init__()
        self.scope = scope
        self.input_layernorm = RMSNorm()
        self.self_attn = LlamaAttention(gen)
        self.post_attention_layernorm = RMSNorm()
        self.mlp = LlamaMLP(gen)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        with superkernel_scope(self.scope == "attention", "attention"):
            x = x + self.self_attn(self.input_layernorm(x), kv, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(torch.nn.Module):
    """``layers`` LLaMA decoder layers and a final norm (decode step)."""

    def __init__(self, layers: int = 2, scope: str | None = None) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.layers = torch.nn.ModuleList(LlamaDecoderLayer(gen, scope) for _ in range(layers))
        self.norm = RMSNorm()

    def forward(self, x: torch.Tensor, kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, kv, cos, sin)
        return self.norm(x)


def llama_inputs() -> tuple[torch.Tensor, ...]:
    """Hidden states, KV cache and the rotary cos/sin of one decode step, from a fixed generator."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(TOKENS, HIDDEN, generator=gen).to(torch.bfloat16)
    kv = torch.randn(TOKENS, KV_LEN, KV_HEADS * HEAD_DIM, generator=gen).to(torch.bfloat16)
    angle = torch.randn(TOKENS, 1, HEAD_DIM, generator=gen)
    return x, kv, angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)


def advisor_case(layers: int = 2) -> tuple[LlamaModel, tuple[torch.Tensor, ...]]:
    """A scope-free LLaMA model for ``python -m pytest_npufuse advise cases/llama_layers.py:advisor_case``."""
    return LlamaModel(layers=layers), llama_inputs()
