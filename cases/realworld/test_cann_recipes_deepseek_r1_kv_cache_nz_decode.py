"""DeepSeek-R1 paged decode: absorbed query, interleaved RoPE, KV latent written to FRACTAL_NZ caches (PA_NZ).

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_r1/models/modeling_deepseek.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (the attention's paged decode without mla_prolog): q through
q_a_proj / q_a_layernorm / q_b_proj, the latent through kv_a_proj_with_mqa; q split into nope/rope,
``npu_transpose_batchmatmul(q_nope, kv_b_proj_w_k, perm_x1=(1, 0, 2), perm_x2=(0, 1, 2), perm_y=(1, 0, 2))``
for the absorbed query, ``npu_interleave_rope`` on q_pe as [1, N, T, D] with cos/sin [1, 1, T, D]; the
latent viewed (T, 1, 1, d) and cos/sin (T, 1, 1, rope) into ``npu_kv_rmsnorm_rope_cache_v2(latent, gamma,
cos, sin, slot_mapping.view(-1), rope_cache, nope_cache, epsilon=..., cache_mode="PA_NZ")``, then both
caches viewed as the 5-D NZ blocks ``(block_num, 1, D // 16, block_size, 16)`` the attention reads, and
``npu_fused_infer_attention_score_v2(q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_rope,
atten_mask=None, actual_seq_kvlen, actual_seq_qlen, block_table, num_query_heads, num_key_value_heads,
softmax_scale, input_layout="TND_NTD", sparse_mode=0, block_size, query_quant_mode=0, key_quant_mode=0,
value_quant_mode=0)`` on those views. Scaffolding: the Linear/RMSNorm modules are plain parameters and
``npu_rms_norm``; four one-token decode requests with their block table and KV lengths. Shrunk: hidden 256, q_lora 64, 4 heads, nope 32, rope 32, kv_lora 64.
"""

import pytest
import torch
import torch_npu

HIDDEN, Q_LORA, HEADS, NOPE, ROPE, KV_LORA = 256, 64, 4, 32, 32, 64
BLOCKS, BLOCK_SIZE, TOKENS = 3, 16, 4
Q_ENDS = [1, 2, 3, 4]  # one token per request, cumulative as TND wants
KV_LENS = [3, 2, 15, 10]  # each request's tokens up to its slot (2, 17, 30, 41) in its block
EPS = 1e-6


class DeepseekR1PagedDecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(41)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[-2] ** 0.5).bfloat16(),
                                      requires_grad=False)

        # --- scaffolding: the layer's Linear / RMSNorm parameters ---
        self.q_a_proj = weight(HIDDEN, Q_LORA)
        self.q_a_layernorm = torch.nn.Parameter(torch.ones(Q_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.q_b_proj = weight(Q_LORA, HEADS * (NOPE + ROPE))
        self.kv_a_proj_with_mqa = weight(HIDDEN, KV_LORA + ROPE)
        self.kv_a_layernorm = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.kv_b_proj_w_k = weight(HEADS, NOPE, KV_LORA)

    def forward(self, hidden_states, cos, sin, slot_mapping, nope_cache, rope_cache, block_table):
        num_tokens = hidden_states.shape[0]
        q_a = torch_npu.npu_rms_norm(hidden_states @ self.q_a_proj, self.q_a_layernorm, EPS)[0]  # scaffolding
        q = q_a @ self.q_b_proj
        latent_cache = hidden_states @ self.kv_a_proj_with_mqa
        q = q.view(num_tokens, HEADS, NOPE + ROPE)
        q_nope, q_pe = torch.split(q, [NOPE, ROPE], dim=-1)
        q_nope = torch_npu.npu_transpose_batchmatmul(q_nope, self.kv_b_proj_w_k, bias=None, scale=None,
                                                    perm_x1=(1, 0, 2), perm_x2=(0, 1, 2), perm_y=(1, 0, 2))
        q_nope = q_nope.view(num_tokens, HEADS, KV_LORA)
        q_pe = q_pe.unsqueeze(0).transpose(1, 2)
        cos = cos.view(1, 1, -1, ROPE)
        sin = sin.view(1, 1, -1, ROPE)
        q_pe = torch_npu.npu_interleave_rope(q_pe, cos, sin)
        q_pe = q_pe.view(1, HEADS, -1, ROPE).transpose(1, 2)
        q_pe = q_pe.view(num_tokens, HEADS, ROPE)

        tmp_slot_mapping = slot_mapping.view(-1)
        latent_cache = latent_cache.view(num_tokens, 1, 1, KV_LORA + ROPE)
        cos = cos.view(-1, 1, 1, ROPE)
        sin = sin.view(-1, 1, 1, ROPE)
        block_num, block_size, _, _ = nope_cache.size()
        torch_npu.npu_kv_rmsnorm_rope_cache_v2(
            latent_cache, self.kv_a_layernorm, cos, sin, tmp_slot_mapping, rope_cache, nope_cache,
            epsilon=EPS, cache_mode="PA_NZ",
        )
        k_rope, k_nope = rope_cache, nope_cache
        KV_CACHE_NZ_DIM = 16
        k_nope = k_nope.view(block_num, 1, KV_LORA // KV_CACHE_NZ_DIM, block_size, KV_CACHE_NZ_DIM)
        k_rope = k_rope.view(block_num, 1, ROPE // KV_CACHE_NZ_DIM, block_size, KV_CACHE_NZ_DIM)
        attn_output, _ = torch.ops.npu.npu_fused_infer_attention_score_v2(
            q_nope, k_nope, k_nope,
            query_rope=q_pe, key_rope=k_rope,
            atten_mask=None,
            actual_seq_kvlen=KV_LENS,
            actual_seq_qlen=Q_ENDS,
            block_table=block_table,
            num_query_heads=HEADS,
            num_key_value_heads=1,
            softmax_scale=(NOPE + ROPE) ** -0.5,
            input_layout="TND_NTD",
            sparse_mode=0,
            block_size=block_size,
            query_quant_mode=0,
            key_quant_mode=0, value_quant_mode=0,
        )
        return attn_output


def decode_step():
    gen = torch.Generator().manual_seed(7)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, ROPE, generator=gen) * 3
    slot_mapping = torch.tensor([[2], [17], [30], [41]], dtype=torch.int64).npu()
    nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, KV_LORA, dtype=torch.bfloat16).npu()
    rope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, ROPE, dtype=torch.bfloat16).npu()
    block_table = torch.tensor([[0], [1], [1], [2]], dtype=torch.int32).npu()
    cos, sin = angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu()
    return hidden, cos, sin, slot_mapping, nope_cache, rope_cache, block_table


def test_deepseek_r1_decode_writes_nz_kv_caches(npufuse):
    report = npufuse.check(DeepseekR1PagedDecode(), *decode_step())
    kernels = [k.op_type for k in report.variant.kernels]
    assert kernels.count("npu::npu_kv_rmsnorm_rope_cache_v2_functional") == 1
    assert kernels.count("npu::npu_fused_infer_attention_score_v2") == 1
    out = DeepseekR1PagedDecode()(*decode_step())
    assert out.shape == (HEADS, TOKENS, KV_LORA) and bool(out.isfinite().all())
