"""MLA decode (vllm-ascend v1 engine): paged FIA v2 with rope in BNSD_NBSD, then the V up-projection
through npu_transpose_batchmatmul.

Reconstruction of the call pattern (not a copy) of
vllm-project/vllm-ascend, vllm_ascend/attention/mla_v1.py @ 182b75ea84ff13ece27b57391331ef8935410aea
(``AscendMLAImpl._forward_decode``, default branch without speculative decoding, FA quantisation or NZ KV,
eager path; and ``_v_up_proj``): the caches are viewed [blocks, kv_heads, block_size, kv_lora_rank] and
[..., rope_dim], the query parts [tokens, heads, 1, dim]; ``npu_fused_infer_attention_score_v2`` gets
q_nope, k_nope, k_nope and keyword arguments query_rope, key_rope, num_query_heads, num_key_value_heads,
input_layout "BNSD_NBSD", atten_mask None, sparse_mode 0, softmax_scale, block_table, block_size,
actual_seq_qlen None, actual_seq_kvlen as a list; its [heads, tokens, 1, rank] output is viewed
[heads, tokens, rank] and multiplied by W_UV [heads, rank, v_dim] with
``npu_transpose_batchmatmul(x, W_UV, perm_y=(1, 0, 2))``, then reshaped [tokens, heads * v_dim].
Scaffolding: lists stand in for the decode metadata (block table, sequence lengths); W_UV is built as
the layer's weight loader builds it (kv_b_proj split, transposed to [heads, rank, v_dim]). Shrunk:
8 heads, kv_lora_rank 64, rope 32, v_head_dim 32, 4 tokens, blocks of 16.
"""

import torch
import torch_npu

HEADS, KV_HEADS, RANK, ROPE, NOPE, V_DIM = 8, 1, 64, 32, 32, 32
BLOCK_SIZE, BLOCKS = 16, 9
# --- scaffolding: stands in for AscendMLAMetadata.decode (block_table, seq_lens_list) ---
BLOCK_TABLE = [[0, 3], [1, 0], [2, 4], [5, 6]]
SEQ_LENS = [20, 7, 32, 18]


class MLADecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(41)
        kv_b_proj_weight = (torch.randn(RANK, HEADS, NOPE + V_DIM, generator=gen) / RANK ** 0.5).bfloat16()
        # --- scaffolding: the weight loader's split and transpose of kv_b_proj ---
        _, w_uv = kv_b_proj_weight.split([NOPE, V_DIM], dim=-1)
        self.register_buffer("W_UV", w_uv.transpose(0, 1).contiguous())
        self.scale = (NOPE + ROPE) ** -0.5

    def _v_up_proj(self, x):
        x = x.view(HEADS, -1, RANK)
        x = torch_npu.npu_transpose_batchmatmul(x, self.W_UV, perm_y=(1, 0, 2))
        x = x.reshape(-1, HEADS * V_DIM)
        return x

    def forward(self, q_nope, q_pe, k_nope, k_pe, block_table):
        num_tokens = q_nope.size(0)
        actual_seq_lengths = None
        k_nope = k_nope.view(-1, KV_HEADS, BLOCK_SIZE, RANK)
        k_pe = k_pe.view(-1, KV_HEADS, BLOCK_SIZE, ROPE)
        input_layout = "BNSD_NBSD"
        q_nope = q_nope.view(num_tokens, HEADS, 1, -1).contiguous()
        q_pe = q_pe.view(num_tokens, HEADS, 1, -1)
        sparse_mode = 0
        attn_mask = None
        common_kwargs = {
            "query_rope": q_pe,
            "key_rope": k_pe,
            "num_query_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "input_layout": input_layout,
            "atten_mask": attn_mask,
            "sparse_mode": sparse_mode,
            "softmax_scale": self.scale,
            "block_table": block_table,
            "block_size": BLOCK_SIZE,
            "actual_seq_qlen": actual_seq_lengths,
            "actual_seq_kvlen": SEQ_LENS,
        }
        attn_output, _ = torch_npu.npu_fused_infer_attention_score_v2(q_nope, k_nope, k_nope, **common_kwargs)
        return self._v_up_proj(attn_output)


def test_mla_v2_decode_then_transpose_batchmatmul(npufuse):
    gen = torch.Generator().manual_seed(42)
    tokens = len(SEQ_LENS)
    q_nope = torch.randn(tokens, HEADS, RANK, generator=gen).bfloat16().npu()
    q_pe = torch.randn(tokens, HEADS, ROPE, generator=gen).bfloat16().npu()
    k_nope = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, RANK, generator=gen).bfloat16().npu()
    k_pe = torch.randn(BLOCKS, BLOCK_SIZE, KV_HEADS, ROPE, generator=gen).bfloat16().npu()
    block_table = torch.tensor(BLOCK_TABLE, dtype=torch.int32).npu()
    npufuse.check(MLADecode().npu(), q_nope, q_pe, k_nope, k_pe, block_table)
