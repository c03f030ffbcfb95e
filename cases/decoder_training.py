"""A LLaMA-style decoder fine-tuned with torch_npu's fused training ops, for the training cases.

The layers are written as Ascend fine-tuning code writes them after the fused-op migration of the affinity-op
guide's table 2 (docs/feature-docs.md#affinity-ops): ``torch_npu.npu_rms_norm`` (RmsNorm & RmsNormGrad),
``torch_npu.npu_rotary_mul`` (RotaryMul & RotaryMulGrad) and ``torch_npu.npu_fusion_attention`` (FlashAttentionScore &
its Grad) with a causal mask, SwiGLU MLP, bfloat16 weights. Fine-tuning freezes the token embedding: the optimizer
updates the decoder layers and the head only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pytest_npufuse import torch_npu

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS, SEQ, BATCH = 512, 256, 4, 2, 64, 512, 2, 64, 2
DTYPE = torch.bfloat16


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN, dtype=DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rms_norm(x, self.weight, 1e-6)[0]


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False, dtype=DTYPE)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False, dtype=DTYPE)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False, dtype=DTYPE)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False, dtype=DTYPE)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, HEADS, HEAD_DIM)
        k = self.k_proj(x).view(b, s, KV_HEADS, HEAD_DIM)
        v = self.v_proj(x).view(b, s, KV_HEADS, HEAD_DIM)
        q, k = torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
        out = torch_npu.npu_fusion_attention(
            q, k, v, HEADS, "BSND", atten_mask=mask, scale=HEAD_DIM**-0.5, sparse_mode=2
        )[0]
        return self.o_proj(out.reshape(b, s, HEADS * HEAD_DIM))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False, dtype=DTYPE)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False, dtype=DTYPE)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False, dtype=DTYPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm()
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN, dtype=DTYPE)
        self.embed_tokens.weight.requires_grad_(False)  # frozen while fine-tuning
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False, dtype=DTYPE)

    def forward(self, ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def rope_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [1, S, 1, D] for BSND, rotate-half layout."""
    inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    angles = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), dim=-1).view(1, SEQ, 1, HEAD_DIM)
    return angles.cos().to(DTYPE), angles.sin().to(DTYPE)


def fine_tune_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, the RoPE tables, the compressed causal mask (sparse mode 2) and the next-token labels."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
    cos, sin = rope_tables()
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    return tokens[:, :-1], cos, sin, mask, tokens[:, 1:]


def causal_lm_loss(labels: torch.Tensor):
    def loss(logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1))

    return loss
