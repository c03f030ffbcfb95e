"""sglang's Ascend backend, graph-mode decode (non-MLA): workspace query, then FIA's ``.out`` form over paged BSH caches.

Reconstruction of the call pattern (not a copy) of
sgl-project/sglang, python/sglang/srt/layers/attention/ascend_backend.py
@ 00484ce0804c5b7bcd704d40d1b6f9f48c42b426 (``AscendAttnBackend.forward_decode_graph``, ``use_mla`` False, with
the capture-time metadata of ``init_forward_metadata_capture_cuda_graph``, where ``seq_lens_cpu_int`` is None
and the KV lengths come from ``seq_lens_cpu_list``): the key/value buffers are viewed [-1, page_size,
kv_heads x head_dim], q reshaped [-1, 1, heads x head_dim]; ``torch_npu._npu_fused_infer_attention_score_get_max_workspace``
and then ``torch_npu.npu_fused_infer_attention_score.out`` get the same keywords (block_table, block_size,
num_heads, num_key_value_heads, input_layout "BSH", scale, actual_seq_lengths_kv) and the latter writes
``out=[output, softmax_lse]`` (a [tokens, 1, heads x v_dim] output and a 1-element lse placeholder);
the output is viewed [tokens, heads x v_dim]. Scaffolding: lists stand in for the capture metadata
(block tables, sequence lengths); the KV buffers are inputs standing in for ``token_to_kv_pool``
(``save_kv_cache`` off). Shrunk: 8 query heads, 2 KV heads of 64, pages of 16, batch 4.
"""

import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE, PAGES = 8, 2, 64, 16, 12
# --- scaffolding: stands in for ForwardMetadata at graph capture (block_tables, seq_lens_cpu_list) ---
BLOCK_TABLES = [[0, 1, 0], [2, 0, 0], [3, 4, 5], [6, 0, 0]]
SEQ_LENS_CPU_LIST = [20, 9, 40, 1]


class DecodeGraph(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.page_size, self.scaling = PAGE_SIZE, HEAD_DIM ** -0.5

    def forward(self, q, k_buffer, v_buffer, block_tables):
        k_cache = k_buffer.view(-1, self.page_size, KV_HEADS * HEAD_DIM)
        v_cache = v_buffer.view(-1, self.page_size, KV_HEADS * HEAD_DIM)
        query = q.reshape(-1, 1, HEADS * HEAD_DIM)
        actual_seq_len_kv = SEQ_LENS_CPU_LIST
        num_tokens = query.shape[0]
        workspace = torch_npu._npu_fused_infer_attention_score_get_max_workspace(
            query,
            k_cache,
            v_cache,
            block_table=block_tables,
            block_size=self.page_size,
            num_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            input_layout="BSH",
            scale=self.scaling,
            actual_seq_lengths_kv=actual_seq_len_kv,
        )
        output = torch.empty((num_tokens, 1, HEADS * HEAD_DIM), dtype=q.dtype, device=q.device)
        softmax_lse = torch.empty(1, dtype=q.dtype, device=q.device)
        torch_npu.npu_fused_infer_attention_score.out(
            query,
            k_cache,
            v_cache,
            block_table=block_tables,
            block_size=self.page_size,
            num_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            input_layout="BSH",
            scale=self.scaling,
            actual_seq_lengths_kv=actual_seq_len_kv,
            workspace=workspace,
            out=[output, softmax_lse],
        )
        return output.view(num_tokens, HEADS * HEAD_DIM)


def test_graph_decode_fia_out(npufuse):
    gen = torch.Generator().manual_seed(91)
    q = torch.randn(len(SEQ_LENS_CPU_LIST), HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    k_buffer = torch.randn(PAGES * PAGE_SIZE, KV_HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    v_buffer = torch.randn(PAGES * PAGE_SIZE, KV_HEADS, HEAD_DIM, generator=gen).bfloat16().npu()
    npufuse.check(DecodeGraph(), q, k_buffer, v_buffer, torch.tensor(BLOCK_TABLES, dtype=torch.int32).npu())
