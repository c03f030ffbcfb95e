"""Dense attention decode: KV cache writes with npu_scatter_nd_update_, then paged BSH attention.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/torchair/torchair_attention.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``AscendAttentionTorchairBackendImpl.forward``, DecodeOnly): slots are split into (block, offset) index
pairs with ``//`` and ``%`` and concatenated, ``npu_scatter_nd_update_`` writes key and value into their
[blocks, block_size, kv_heads, head_dim] caches in place, and the query viewed [tokens, 1, heads*dim]
goes to ``npu_fused_infer_attention_score`` with keyword arguments, layout "BSH", sparse_mode 0 and
``actual_seq_lengths_kv`` as a list. Shapes shrunk (Qwen-like GQA, 8 query heads, 2 KV heads, dim 64).
"""

import pytest
import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
BLOCKS, BLOCK_SIZE = 5, 16
SEQ_LENS = [9, 30, 17, 48]


class CachedDecodeAttention(torch.nn.Module):
    def forward(self, query, key, value, key_cache, value_cache, slots, block_table):
        tokens = query.shape[0]
        slot_index = slots.reshape(-1, 1)
        block_index = slot_index // key_cache.shape[1]
        offset = slot_index % key_cache.shape[1]
        indices = torch.cat((block_index, offset), dim=1)
        torch_npu.npu_scatter_nd_update_(key_cache, indices, key)
        torch_npu.npu_scatter_nd_update_(value_cache, indices, value)
        query = query.view(tokens, 1, HEADS * HEAD_DIM).contiguous()
        output, _ = torch_npu.npu_fused_infer_attention_score(
            query=query, key=key_cache, value=value_cache,
            query_rope=None, key_rope=None,
            num_heads=HEADS, num_key_value_heads=KV_HEADS, input_layout="BSH",
            atten_mask=None, sparse_mode=0, scale=HEAD_DIM ** -0.5,
            antiquant_mode=0, antiquant_scale=None,
            block_table=block_table, block_size=key_cache.shape[1],
            actual_seq_lengths_kv=SEQ_LENS,
        )
        return output.view(tokens, HEADS * HEAD_DIM)


def step():
    gen = torch.Generator().manual_seed(3)
    tokens = len(SEQ_LENS)
    query = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).half().npu()
    key = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    value = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    key_cache = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    value_cache = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, generator=gen).half().npu()
    block_table = torch.tensor([[0, 0, 0], [1, 2, 0], [3, 0, 0], [4, 2, 1]], dtype=torch.int32).npu()
    slots = torch.tensor([8, 16 + 13, 48 + 16, 64 + 15], dtype=torch.int64).npu()
    return query, key, value, key_cache, value_cache, slots, block_table


def test_cache_write_then_paged_decode(npufuse):
    npufuse.check(CachedDecodeAttention(), *step())
