"""Dense decoder layer prefill (openPangu 7B): add-RMSNorm, fused QKV, BSH rotary, causal FIA, SwiGLU MLP.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/pangu_7b/models/modeling_openpangu_dense.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (RMSNorm forward, attention prefill branch, MLP):
``npu_add_rms_norm(residual, x, weight, eps)`` unpacked as (y, _, x), one QKV projection split into
query/key/value and viewed [B, S, N, D], ``npu_apply_rotary_pos_emb(q, k, cos, sin, layout='BSH')``,
``torch.ops.npu.npu_fused_infer_attention_score`` with input_layout "BSH", a 2048x2048 causal mask,
sparse_mode=2 and next_tokens=0, o_proj, ``npu_rms_norm(...)[0]``, gate_up and ``npu_swiglu``.
Shrunk: hidden 256, 4 query heads and 2 KV heads of 64, 16 tokens.
"""

import pytest
import torch
import torch_npu

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, SEQ = 256, 4, 2, 64, 384, 16
EPS = 1e-6


class DenseLayerPrefill(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(71)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[0] ** 0.5).bfloat16())

        self.input_norm = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
        self.post_norm = torch.nn.Parameter(torch.ones(HIDDEN, dtype=torch.bfloat16))
        self.qkv = weight(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM)
        self.o_proj = weight(HEADS * HEAD_DIM, HIDDEN)
        self.gate_up = weight(HIDDEN, 2 * INTER)
        self.down = weight(INTER, HIDDEN)

    def forward(self, hidden_states, residual, cos, sin, attention_mask):
        bsz, q_len, _ = hidden_states.shape
        hidden_states, _, residual = torch_npu.npu_add_rms_norm(residual, hidden_states, self.input_norm, EPS)
        qkv = hidden_states @ self.qkv
        query, key, value = qkv.split((HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM), dim=2)
        query = query.view(bsz, q_len, HEADS, HEAD_DIM).contiguous()
        key = key.view(bsz, q_len, KV_HEADS, HEAD_DIM).contiguous()
        query, key = torch_npu.npu_apply_rotary_pos_emb(query, key, cos, sin, layout='BSH')
        query = query.view(bsz, q_len, -1)
        key = key.view(bsz, q_len, -1)
        attn, _ = torch.ops.npu.npu_fused_infer_attention_score(
            query, key, value,
            num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BSH",
            atten_mask=attention_mask, sparse_mode=2, scale=HEAD_DIM ** -0.5, next_tokens=0)
        hidden_states = attn.reshape(bsz, q_len, HEADS * HEAD_DIM) @ self.o_proj
        residual = residual + hidden_states
        normed = torch_npu.npu_rms_norm(residual, self.post_norm, EPS)[0]
        return residual + torch_npu.npu_swiglu(normed @ self.gate_up) @ self.down


def prompt():
    gen = torch.Generator().manual_seed(9)
    hidden = torch.randn(1, SEQ, HIDDEN, generator=gen).bfloat16().npu()
    residual = torch.randn(1, SEQ, HIDDEN, generator=gen).bfloat16().npu()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    freqs = torch.outer(torch.arange(SEQ).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1).view(1, SEQ, 1, HEAD_DIM)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1).npu()
    return hidden, residual, emb.cos().bfloat16().npu(), emb.sin().bfloat16().npu(), mask


def test_dense_layer_prefill(npufuse):
    npufuse.check(DenseLayerPrefill(), *prompt())
