"""Qwen rotary embedding in TorchAir graph mode: cached cos/sin, 4-D npu_apply_rotary_pos_emb.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/ops/torchair_rotary_embedding.py
@ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1 (``rope_forward`` for Qwen with torchair): cos/sin gathered by
position from a cached table, query and key viewed [..., heads, head_dim], cos/sin unsqueezed twice at -2,
query/key unsqueezed at 1, ``npu_apply_rotary_pos_emb(query, key, cos, sin)`` with the default layout,
outputs flattened. Followed by the q/k RMSNorm Qwen3 applies with ``npu_rms_norm``. Shrunk: 4 heads of 64.
"""

import pytest
import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM, MAX_POS, TOKENS = 4, 2, 64, 128, 6


class QwenRope(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        inv_freq = 1.0 / (1000000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        emb = torch.outer(torch.arange(MAX_POS).float(), inv_freq).repeat(1, 2)
        self.register_buffer("cos_cached", emb.cos().bfloat16())
        self.register_buffer("sin_cached", emb.sin().bfloat16())
        self.q_norm = torch.nn.Parameter(torch.ones(HEAD_DIM, dtype=torch.bfloat16))
        self.k_norm = torch.nn.Parameter(torch.ones(HEAD_DIM, dtype=torch.bfloat16))

    def forward(self, positions, query, key):
        query = torch_npu.npu_rms_norm(query.view(-1, HEADS, HEAD_DIM), self.q_norm, 1e-6)[0].flatten(-2)
        key = torch_npu.npu_rms_norm(key.view(-1, KV_HEADS, HEAD_DIM), self.k_norm, 1e-6)[0].flatten(-2)
        cos = self.cos_cached[positions]
        sin = self.sin_cached[positions]
        query = query.view(*query.shape[:-1], -1, HEAD_DIM).contiguous()
        key = key.view(*key.shape[:-1], -1, HEAD_DIM).contiguous()
        cos = cos.unsqueeze(-2).unsqueeze(-2)
        sin = sin.unsqueeze(-2).unsqueeze(-2)
        query = query.unsqueeze(1)
        key = key.unsqueeze(1)
        q_embed, k_embed = torch_npu.npu_apply_rotary_pos_emb(query, key, cos, sin)
        return q_embed.flatten(-2), k_embed.flatten(-2)


def test_qwen_rope_in_graph(npufuse):
    gen = torch.Generator().manual_seed(15)
    positions = torch.tensor([0, 7, 8, 31, 64, 127]).npu()
    query = torch.randn(TOKENS, HEADS * HEAD_DIM, generator=gen).bfloat16().npu()
    key = torch.randn(TOKENS, KV_HEADS * HEAD_DIM, generator=gen).bfloat16().npu()
    npufuse.check(QwenRope(), positions, query, key)
