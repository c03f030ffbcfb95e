"""Small DeepSeek-style decoder layers in TorchAir style, shared by the bundled cases.

The shapes are decode-sized but small, so a case compiles and runs in about a second on a CPU. Scope
placement follows the layouts of the SuperKernel scope guide (docs/feature-docs.md#scope-analysis) and the public model
code of docs/sources.md#hw-4: attention only, MoE only, the whole decoder layer, all layers, and
prefill gated off with ``enable and not is_prefill``; multi-stream placement follows the shared-expert
and MLA side-stream patterns of docs/sources.md#hw-4-2 to docs/sources.md#hw-4-4.
"""

from __future__ import annotations

import contextlib

import torch

from pytest_npufuse import superkernel_scope, torch_npu, torchair

TOKENS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_LEN = 8, 256, 4, 2, 64, 64
EXPERTS, TOP_K, INTER = 8, 2, 256


def stream_scope(tag: str | None):
    """A side stream when ``tag`` is given, else the current one."""
    return torchair.scope.npu_stream_switch(tag) if tag else contextlib.nullcontext()


def _param(gen: torch.Generator, *shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[-2] ** 0.5).to(torch.bfloat16))


class Attention(torch.nn.Module):
    """RMSNorm, Q projection, fused attention over a KV cache, O projection."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
        self.wq = _param(gen, HIDDEN, HEADS * HEAD_DIM)
        self.wo = _param(gen, HEADS * HEAD_DIM, HIDDEN)

    def forward(self, x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        normed, _ = torch_npu.npu_rms_norm(x, self.gamma)
        q = (normed @ self.wq).unsqueeze(1)
        out, _ = torch_npu.npu_fused_infer_attention_score(
            q, kv, kv, num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BSH", scale=HEAD_DIM**-0.5
        )
        return out.squeeze(1) @ self.wo


class SharedExpert(torch.nn.Module):
    """The always-on expert, optionally on a side stream after waiting for ``after``."""

    def __init__(self, gen: torch.Generator, stream: str | None) -> None:
        super().__init__()
        self.stream = stream
        self.w13 = _param(gen, HIDDEN, 2 * INTER)
        self.w2 = _param(gen, INTER, HIDDEN)

    def forward(self, x: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        with stream_scope(self.stream):
            if self.stream:
                torchair.scope.npu_wait_tensor(x, after)
            return torch_npu.npu_swiglu(x @ self.w13) @ self.w2


class MoE(torch.nn.Module):
    """Router, top-k gating, routed experts as grouped matmuls, and a shared expert."""

    def __init__(self, gen: torch.Generator, shared_stream: str | None = None) -> None:
        super().__init__()
        self.router = _param(gen, HIDDEN, EXPERTS)
        self.w13 = _param(gen, EXPERTS, HIDDEN, 2 * INTER)
        self.w2 = _param(gen, EXPERTS, INTER, HIDDEN)
        self.shared = SharedExpert(gen, shared_stream)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x @ self.router
        shared = self.shared(x, logits)
        weights, experts, _ = torch_npu.npu_moe_gating_top_k(logits, TOP_K, norm_type=1)
        flat = experts.reshape(-1).long()
        counts = torch.zeros(EXPERTS, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        order = torch.argsort(flat, stable=True)
        routed = x.repeat_interleave(TOP_K, dim=0)[order]
        (gate_up,) = torch_npu.npu_grouped_matmul(
            [routed], [self.w13], group_list=counts, split_item=2, group_type=0, group_list_type=1
        )
        (down,) = torch_npu.npu_grouped_matmul(
            [torch_npu.npu_swiglu(gate_up)], [self.w2], group_list=counts, split_item=2, group_type=0, group_list_type=1
        )
        unsorted = torch.empty_like(down).index_copy_(0, order, down)
        combined = (unsorted.reshape(TOKENS, TOP_K, HIDDEN) * weights.unsqueeze(-1)).sum(dim=1)
        return combined + shared


class DecoderLayer(torch.nn.Module):
    """Attention and MoE with residuals; ``scope`` puts a SuperKernel scope around 'attention', 'moe'
    or the whole 'layer' (decode only, as the scope guide recommends)."""

    def __init__(self, gen: torch.Generator, scope: str | None = None, shared_stream: str | None = None) -> None:
        super().__init__()
        self.scope = scope
        self.attn = Attention(gen)
        self.norm = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
        self.moe = MoE(gen, shared_stream)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, is_prefill: bool = False) -> torch.Tensor:
        decode = not is_prefill
        with superkernel_scope(decode and self.scope == "layer", "decoder_layer"):
            with superkernel_scope(decode and self.scope == "attention", "attention"):
                x = x + self.attn(x, kv)
            normed, _ = torch_npu.npu_rms_norm(x, self.norm)
            with superkernel_scope(decode and self.scope == "moe", "moe"):
                x = x + self.moe(normed)
        return x


class Decoder(torch.nn.Module):
    """``layers`` decoder layers; ``all_layers=True`` wraps the whole loop in one scope."""

    def __init__(self, layers: int = 2, scope: str | None = None, all_layers: bool = False,
                 shared_stream: str | None = None, is_prefill: bool = False) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(11)
        self.layers = torch.nn.ModuleList(DecoderLayer(gen, scope, shared_stream) for _ in range(layers))
        self.all_layers, self.is_prefill = all_layers, is_prefill

    def forward(self, x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        with superkernel_scope(self.all_layers and not self.is_prefill, "all_layers"):
            for layer in self.layers:
                x = layer(x, kv, self.is_prefill)
        return x


def decode_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states of one decode step and a KV cache, from a fixed generator."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(TOKENS, HIDDEN, generator=gen).to(torch.bfloat16)
    kv = torch.randn(TOKENS, KV_LEN, KV_HEADS * HEAD_DIM, generator=gen).to(torch.bfloat16)
    return x, kv


def advisor_case(layers: int = 2) -> tuple[Decoder, tuple[torch.Tensor, torch.Tensor]]:
    """A scope-free decoder for ``python -m pytest_npufuse advise cases/decoder_layers.py:advisor_case``."""
    return Decoder(layers=layers), decode_inputs()
