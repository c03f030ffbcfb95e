"""MLA paged decode attention with rope inputs, then the o_proj weight prefetch (vllm-ascend TorchAir).

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/torchair_mla.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``_forward_decode`` graph branch and ``_v_up_proj_and_o_proj``): the latent caches are viewed
[blocks, kv_heads, block_size, D] and passed as key and value of ``npu_fused_infer_attention_score`` with
``query_rope``/``key_rope``, layout "BNSD", sparse_mode 0, antiquant_mode 0, ``block_table``/``block_size``
and ``actual_seq_lengths_kv`` as a list; the output goes through W_UV with ``torch.bmm``, ``npu_prefetch``
announces o_proj's weight (16 MB cap), then o_proj. Shapes shrunk (8 heads, latent 128, rope 64).
"""

import pytest
import torch
import torch_npu

HEADS, KV_LORA, ROPE, V_DIM, HIDDEN = 8, 128, 64, 32, 256
BLOCKS, BLOCK_SIZE, BATCH = 6, 16, 3
SEQ_LENS = [5, 21, 33]
O_PROJ_PREFETCH_CAP = 16 * 1024 * 1024


class MlaPagedDecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(21)
        self.w_uv = torch.nn.Parameter((torch.randn(HEADS, KV_LORA, V_DIM, generator=gen) / 12).bfloat16())
        self.o_proj = torch.nn.Parameter((torch.randn(HEADS * V_DIM, HIDDEN, generator=gen) / 16).bfloat16())
        self.scale = (KV_LORA + ROPE) ** -0.5

    def forward(self, q_nope, q_pe, nope_cache, rope_cache, block_table):
        tokens = q_nope.shape[0]
        k_nope = nope_cache.view(-1, 1, BLOCK_SIZE, KV_LORA)
        k_pe = rope_cache.view(-1, 1, BLOCK_SIZE, ROPE)
        q_nope = q_nope.view(tokens, HEADS, 1, -1)
        q_pe = q_pe.view(tokens, HEADS, 1, -1)
        attn, _ = torch_npu.npu_fused_infer_attention_score(
            q_nope, k_nope, k_nope,
            query_rope=q_pe, key_rope=k_pe,
            num_heads=HEADS, num_key_value_heads=1, input_layout="BNSD",
            atten_mask=None, sparse_mode=0, scale=self.scale,
            antiquant_mode=0, antiquant_scale=None,
            block_table=block_table, block_size=BLOCK_SIZE,
            actual_seq_lengths_kv=SEQ_LENS, actual_seq_lengths=None,
        )
        x = attn.view(-1, HEADS, KV_LORA).transpose(0, 1)
        x = torch.bmm(x, self.w_uv)
        x = x.transpose(0, 1).reshape(-1, HEADS * V_DIM)
        size = min(O_PROJ_PREFETCH_CAP, self.o_proj.element_size() * self.o_proj.numel())
        torch_npu.npu_prefetch(self.o_proj, x, size, 0)
        return x @ self.o_proj


def decode_state():
    gen = torch.Generator().manual_seed(8)
    q_nope = torch.randn(BATCH, HEADS, KV_LORA, generator=gen).bfloat16().npu()
    q_pe = torch.randn(BATCH, HEADS, ROPE, generator=gen).bfloat16().npu()
    nope_cache = torch.randn(BLOCKS, BLOCK_SIZE, 1, KV_LORA, generator=gen).bfloat16().npu()
    rope_cache = torch.randn(BLOCKS, BLOCK_SIZE, 1, ROPE, generator=gen).bfloat16().npu()
    block_table = torch.tensor([[0, 5, 0], [1, 2, 0], [3, 4, 5]], dtype=torch.int32).npu()
    return q_nope, q_pe, nope_cache, rope_cache, block_table


def test_mla_paged_decode_attention(npufuse):
    report = npufuse.check(MlaPagedDecode(), *decode_state())
    assert any(k.op_type == "npu::npu_prefetch" for k in report.variant.kernels)
