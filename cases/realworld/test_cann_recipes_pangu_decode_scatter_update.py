"""Dense decoder attention decode (openPangu 7B): BSH rotary, in-place KV-cache write with scatter_update_,
then decode FIA over the whole cache.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/pangu_7b/models/modeling_openpangu_dense.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``exec_qkv`` with q_len == 1, and ``prepare_inputs_for_generation``
for decode): the fused QKV output is split and viewed [B, S, N, D], ``npu_apply_rotary_pos_emb(q, k, cos, sin,
layout='BSH')``, query and key viewed back to [B, S, N x D]; ``torch_npu.scatter_update_(past_key, kv_len,
key_states, -2)`` and the same for value write the new token of batch b at position ``kv_len[b]`` of the
[B, max_seq, kv_heads x D] caches; ``torch.ops.npu.npu_fused_infer_attention_score`` then reads the caches
with input_layout "BSH", atten_mask None (decode), scale, ``actual_seq_lengths_kv = (kv_len + 1)`` as a list,
antiquant_mode=0, antiquant_scale=None. Scaffolding: the host list of KV lengths is given (the recipe computes
it on the host from kv_len before the step); the caches are module buffers standing in for past_key_value.
Shrunk: 4 query heads, 2 KV heads of 64, batch 3, caches of 32 positions.
"""

import torch
import torch_npu

HEADS, KV_HEADS, HEAD_DIM, BATCH, MAX_SEQ = 4, 2, 64, 3, 32
# --- scaffolding: kv_len of this step and its host copy, as prepare_inputs_for_generation makes them ---
KV_LEN = [5, 17, 30]
ACTUAL_SEQ_LENGTHS_KV = [length + 1 for length in KV_LEN]


class DecodeAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(81)
        self.register_buffer("past_key", torch.randn(BATCH, MAX_SEQ, KV_HEADS * HEAD_DIM, generator=gen).bfloat16())
        self.register_buffer("past_value", torch.randn(BATCH, MAX_SEQ, KV_HEADS * HEAD_DIM, generator=gen).bfloat16())
        self.num_heads_per_rank, self.num_key_value_heads_per_rank, self.head_dim = HEADS, KV_HEADS, HEAD_DIM
        self.scale_fa = 1 / (self.head_dim ** 0.5)

    def forward(self, qkv, kv_len, cos, sin):
        bsz, q_len, _ = qkv.size()
        query_states, key_states, value_states = qkv.split((self.num_heads_per_rank * self.head_dim,
                                                            self.num_key_value_heads_per_rank * self.head_dim,
                                                            self.num_key_value_heads_per_rank * self.head_dim), dim=2)
        query_shape = (bsz, q_len, self.num_heads_per_rank, self.head_dim)
        key_value_shape = (bsz, q_len, self.num_key_value_heads_per_rank, self.head_dim)
        query_states = query_states.view(query_shape).contiguous()
        key_states = key_states.view(key_value_shape).contiguous()
        query_states, key_states = torch_npu.npu_apply_rotary_pos_emb(query_states, key_states, cos, sin, layout='BSH')
        query_states = query_states.view(bsz, q_len, -1)
        key_states = key_states.view(bsz, q_len, -1)

        past_key, past_value = self.past_key, self.past_value
        torch_npu.scatter_update_(past_key, kv_len, key_states, -2)
        torch_npu.scatter_update_(past_value, kv_len, value_states, -2)

        attn_output, _ = torch.ops.npu.npu_fused_infer_attention_score(
            query_states, past_key, past_value,
            num_heads=self.num_heads_per_rank,
            num_key_value_heads=self.num_key_value_heads_per_rank,
            input_layout="BSH",
            atten_mask=None,
            scale=self.scale_fa,
            actual_seq_lengths_kv=ACTUAL_SEQ_LENGTHS_KV,
            antiquant_mode=0, antiquant_scale=None
        )
        return attn_output.reshape(bsz, q_len, self.num_heads_per_rank * self.head_dim)


def test_decode_kv_write_then_fia(npufuse):
    gen = torch.Generator().manual_seed(82)
    qkv = torch.randn(BATCH, 1, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=gen).bfloat16().npu()
    kv_len = torch.tensor(KV_LEN, dtype=torch.int32).npu()
    angles = torch.randn(BATCH, 1, 1, HEAD_DIM, generator=gen)
    npufuse.check(DecodeAttention().npu(), qkv, kv_len, angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu())
