"""sglang's Ascend backend, prefill (extend) over a paged cache with _npu_flash_attention_qlens.

Reconstruction of the call pattern (not a copy) of
sgl-project/sglang, python/sglang/srt/layers/attention/ascend_backend.py
@ 00484ce0804c5b7bcd704d40d1b6f9f48c42b426 (``AscendAttnBackend.gen_attention_mask`` and
``forward_extend``, non-MLA, ``ASCEND_USE_FIA`` unset, ``qk_head_dim <= 128``): the backend builds a 128 x 128
mask marking the upper triangle (bfloat16: value 1); q is reshaped [tokens, heads x head_dim], an output
[tokens, heads x v_head_dim] is allocated, and ``torch_npu._npu_flash_attention_qlens`` gets, by keyword,
query, key_cache, value_cache, mask, block_table, seq_len (the extend lengths, int32), context_lens (the
whole sequence lengths, int32), scale_value, num_heads, num_kv_heads and out. Scaffolding: the caches are
given already holding the extended tokens (sglang's ``set_kv_buffer`` wrote them; ``save_kv_cache`` is
off here), and lists stand in for ForwardBatch / ForwardMetadata. Shrunk: 4 query heads, 2 KV heads of 64,
two requests with cached prefixes, pages of 16.
"""

import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE, PAGES = 4, 2, 64, 16, 8
# --- scaffolding: stands in for ForwardMetadata (extend_seq_lens_cpu_int, seq_lens_cpu_int, block_tables) ---
EXTEND_SEQ_LENS = torch.tensor([5, 11], dtype=torch.int32)
SEQ_LENS = torch.tensor([20, 27], dtype=torch.int32)
BLOCK_TABLES = torch.tensor([[2, 0], [5, 1]], dtype=torch.int32)


class AscendExtend(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.device = "npu"
        self.register_buffer("mask", self.gen_attention_mask(128, torch.bfloat16))
        self.scaling = HEAD_DIM ** -0.5

    def gen_attention_mask(self, max_seq_len: int, dtype=torch.float16):
        mask_flag = torch.tril(torch.ones((max_seq_len, max_seq_len), dtype=torch.bool)).view(max_seq_len, max_seq_len)
        mask_flag = ~mask_flag
        if dtype == torch.float16:
            mask_value = torch.finfo(torch.float32).min
        else:
            mask_value = 1
        return torch.masked_fill(torch.zeros(size=(max_seq_len, max_seq_len)), mask_flag, mask_value).to(dtype)

    def forward(self, q, k_cache, v_cache, block_tables):
        query = q.reshape(-1, HEADS * HEAD_DIM)
        attn_output = torch.empty((query.shape[0], HEADS * HEAD_DIM), dtype=query.dtype, device=query.device)
        torch_npu._npu_flash_attention_qlens(
            query=query,
            key_cache=k_cache,
            value_cache=v_cache,
            mask=self.mask,
            block_table=block_tables,
            seq_len=EXTEND_SEQ_LENS,
            context_lens=SEQ_LENS,
            scale_value=self.scaling,
            num_heads=HEADS,
            num_kv_heads=KV_HEADS,
            out=attn_output,
        )
        return attn_output


def test_extend_attention_over_cached_prefix(npufuse):
    gen = torch.Generator().manual_seed(61)
    tokens = int(EXTEND_SEQ_LENS.sum())
    q = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    k_cache = torch.randn(PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    v_cache = torch.randn(PAGES, PAGE_SIZE, KV_HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    npufuse.check(AscendExtend(), q, k_cache, v_cache, BLOCK_TABLES.npu())
