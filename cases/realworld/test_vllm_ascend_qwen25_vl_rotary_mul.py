"""Qwen2.5-VL vision attention on Ascend: fused QKV split, cos/sin doubled, npu_rotary_mul on q and k.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/patch/worker/patch_qwen2_5_vl.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``AscendQwen2_5_VisionAttention.forward``): the QKV projection of [s, b, c] is split into
[b, s, 3, heads, dim] (the original uses einops.rearrange; here view + permute), cos and sin are the
rotary tables concatenated with themselves and reshaped [1, s, 1, dim], ``npu_rotary_mul(q, cos, sin)``
and ``npu_rotary_mul(k, cos, sin)`` with the default mode, then q/k/v flattened to [b*s, heads, dim].
The original continues with ``torch_npu._npu_flash_attention_unpad``, which the op library does not
provide: the fragment stops before it. Shrunk: 4 heads of 64, 32 patches.
"""

import pytest
import torch
import torch_npu

HEADS, HEAD_DIM, SEQ, BATCH = 4, 64, 32, 1
HIDDEN = HEADS * HEAD_DIM


class VisionRotary(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(141)
        self.qkv = torch.nn.Parameter((torch.randn(HIDDEN, 3 * HIDDEN, generator=gen) / 16).half())

    def forward(self, x, rotary_pos_emb_cos, rotary_pos_emb_sin):
        x = x @ self.qkv
        seq_len, batch_size, _ = x.shape
        qkv = x.view(seq_len, batch_size, 3, HEADS, HEAD_DIM).permute(1, 0, 2, 3, 4)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        cos = torch.cat((rotary_pos_emb_cos, rotary_pos_emb_cos), dim=-1).reshape(1, -1, 1, HEAD_DIM)
        sin = torch.cat((rotary_pos_emb_sin, rotary_pos_emb_sin), dim=-1).reshape(1, -1, 1, HEAD_DIM)
        q = torch_npu.npu_rotary_mul(q, cos, sin)
        k = torch_npu.npu_rotary_mul(k, cos, sin)
        return [t.reshape(-1, HEADS, HEAD_DIM).contiguous() for t in (q, k, v)]


def test_vision_rotary_mul(npufuse):
    gen = torch.Generator().manual_seed(21)
    x = torch.randn(SEQ, BATCH, HIDDEN, generator=gen).half().npu()
    angles = torch.rand(SEQ, HEAD_DIM // 2, generator=gen) * 6
    npufuse.check(VisionRotary(), x, angles.cos().half().npu(), angles.sin().half().npu())
