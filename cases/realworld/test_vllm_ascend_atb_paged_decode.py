"""Dense-model decode on the ATB kernels: KV write with _npu_reshape_and_cache, then _npu_paged_attention.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/attention/attention_v1.py @ 7f2673ea2d41244bc4e07f4b6f008c4f021c41d1
(``AscendAttentionBackendImpl.forward`` with decode tokens, no prefill/context parallelism, not capturing,
and ``_forward_decode_only`` without a sliding window): ``torch_npu._npu_reshape_and_cache`` writes
``key[:num_decode_tokens]`` / ``value[:num_decode_tokens]`` into the [blocks, block_size, kv_heads, head_size]
caches at ``slot_mapping[:num_decode_tokens]`` (keyword ``slot_indices``), then
``torch_npu._npu_paged_attention`` (all keywords: query, key_cache, value_cache, num_kv_heads, num_heads,
scale_value, block_table, context_lens, out) fills the preallocated ``output``. Scaffolding: a small
metadata class stands in for AscendMetadata (slot mapping, int32 block tables and sequence lengths), the
caches are module buffers standing in for ``kv_cache``. Shrunk: 8 query heads, 2 KV heads of 64, four
sequences, blocks of 16.
"""

import torch
import torch_npu

HEADS, KV_HEADS, HEAD_SIZE = 8, 2, 64
BLOCKS, BLOCK_SIZE = 10, 16


class Metadata:  # --- scaffolding: stands in for AscendMetadata of a DecodeOnly step ---
    def __init__(self) -> None:
        self.seq_lens = torch.tensor([9, 30, 17, 48], dtype=torch.int32)
        self.block_tables = torch.tensor([[0, 0, 0], [1, 2, 0], [3, 7, 0], [4, 5, 6]], dtype=torch.int32)
        # each sequence's newest token (position seq_len - 1) goes to block_tables[pos // 16] * 16 + pos % 16
        self.slot_mapping = torch.tensor([0 * 16 + 8, 2 * 16 + 13, 7 * 16 + 0, 6 * 16 + 15], dtype=torch.int32)
        self.num_decode_tokens = 4


class DecodeAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(51)
        self.register_buffer("key_cache", torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, generator=gen).half())
        self.register_buffer("value_cache", torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_SIZE, generator=gen).half())
        self.num_heads, self.num_kv_heads, self.scale = HEADS, KV_HEADS, HEAD_SIZE ** -0.5
        self.attn_metadata = Metadata()

    def _forward_decode_only(self, query, attn_metadata, output):
        torch_npu._npu_paged_attention(
            query=query,
            key_cache=self.key_cache,
            value_cache=self.value_cache,
            num_kv_heads=self.num_kv_heads,
            num_heads=self.num_heads,
            scale_value=self.scale,
            block_table=attn_metadata.block_tables,
            context_lens=attn_metadata.seq_lens,
            out=output)
        return output

    def forward(self, query, key, value, output):
        attn_metadata = self.attn_metadata
        num_decode_tokens = attn_metadata.num_decode_tokens
        slot_mapping = attn_metadata.slot_mapping[:num_decode_tokens]
        torch_npu._npu_reshape_and_cache(
            key=key[:num_decode_tokens],
            value=value[:num_decode_tokens],
            key_cache=self.key_cache,
            value_cache=self.value_cache,
            slot_indices=slot_mapping)
        output = self._forward_decode_only(query, attn_metadata, output)
        return output


def test_reshape_and_cache_then_paged_attention(npufuse):
    gen = torch.Generator().manual_seed(52)
    query = torch.randn(4, HEADS, HEAD_SIZE, generator=gen).half().npu()
    key = torch.randn(4, KV_HEADS, HEAD_SIZE, generator=gen).half().npu()
    value = torch.randn(4, KV_HEADS, HEAD_SIZE, generator=gen).half().npu()
    output = torch.empty(4, HEADS, HEAD_SIZE, dtype=torch.float16).npu()
    npufuse.check(DecodeAttention().npu(), query, key, value, output)
