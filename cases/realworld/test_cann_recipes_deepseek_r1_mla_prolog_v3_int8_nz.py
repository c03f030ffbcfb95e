"""DeepSeek-R1 paged decode through torch.ops.npu.npu_mla_prolog_v3: A8W8 weights, int8 KV cache, int8 query, PA_NZ.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_r1/models/modeling_deepseek.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (``forward_page_attention_mla_prolog`` with the "a8" matmul quant
mode and the "int8" KV cache): cos/sin viewed ``(-1, rope)``; ``npu_dynamic_quant(hidden_states)`` with its
scale viewed ``(-1, 1)``; ``torch.ops.npu.npu_mla_prolog_v3(token_x=..., weight_dq=..., weight_uq_qr=...,
weight_uk=..., weight_dkv_kr=..., rmsnorm_gamma_cq=..., rmsnorm_gamma_ckv=..., rope_sin=sin, rope_cos=cos,
cache_index=slot_mapping, kv_cache=nope_cache, kr_cache=rope_cache, dequant_scale_x=pertoken_scale,
dequant_scale_w_dq=q_a_proj.weight_scale.view(1, -1), dequant_scale_w_uq_qr=..., dequant_scale_w_dkv_kr=...,
quant_scale_ckv=ckv_scale_reci, quant_scale_ckr=None, smooth_scales_cq=None, rmsnorm_epsilon_cq=...,
rmsnorm_epsilon_ckv=..., cache_mode="PA_NZ", weight_quant_mode=2, kv_cache_quant_mode=1,
query_quant_mode=1)`` unpacked as ``q_nope, q_pe, dequant_scale_q_nope, _, _``; the caches viewed as NZ
blocks ``(block_num, 1, D // (16 * factor), block_size, 16 * factor)`` with factor 2 for the int8 nope cache
and 1 for the rope cache, and ``dequant_scale_q_nope.view(num_tokens, -1)`` for the attention, then
``self.fa_ops.npu_fused_infer_attention_score_v2(q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_rope,
atten_mask=None, actual_seq_kvlen=..., actual_seq_qlen=..., block_table=..., dequant_scale_query=...,
dequant_scale_key=self.ckv_scale, dequant_scale_value=self.ckv_scale, num_query_heads, num_key_value_heads,
softmax_scale, input_layout="TND_NTD", sparse_mode=0, block_size, query_quant_mode=3, key_quant_mode=0,
value_quant_mode=0)`` with ``fa_ops = torch.ops.npu`` and a per-tensor float32 ``ckv_scale`` of shape [1].
Scaffolding: the layer's quantised projections are plain int8 parameters with per-channel scales; four
one-token decode requests with their block table and KV lengths.
Shrunk: hidden 256, q_lora 64, 4 heads, nope 32, rope 32, kv_lora 64.
"""

import pytest
import torch
import torch_npu

HIDDEN, Q_LORA, HEADS, NOPE, ROPE, KV_LORA = 256, 64, 4, 32, 32, 64
BLOCKS, BLOCK_SIZE, TOKENS = 3, 16, 4
Q_ENDS = [1, 2, 3, 4]  # one token per request, cumulative as TND wants
KV_LENS = [4, 3, 14, 13]  # each request's tokens up to its slot (3, 18, 29, 44) in its block
EPS = 1e-6


class DeepseekR1MlaPrologInt8(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(91)

        def int8(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8),
                                      requires_grad=False)

        def channel_scale(columns: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.rand(columns, generator=gen) / 2000, requires_grad=False)

        # --- scaffolding: the layer's A8W8 projections, norms, absorbed W_UK and C8 cache scale ---
        self.q_a_proj_weight, self.q_a_proj_weight_scale = int8(HIDDEN, Q_LORA), channel_scale(Q_LORA)
        self.q_b_proj_weight = int8(Q_LORA, HEADS * (NOPE + ROPE))
        self.q_b_proj_weight_scale = channel_scale(HEADS * (NOPE + ROPE))
        self.kv_a_proj_with_mqa_weight = int8(HIDDEN, KV_LORA + ROPE)
        self.kv_a_proj_with_mqa_weight_scale = channel_scale(KV_LORA + ROPE)
        self.kv_b_proj_w_k = torch.nn.Parameter((torch.randn(HEADS, NOPE, KV_LORA, generator=gen) / 6).bfloat16(),
                                                requires_grad=False)
        self.q_a_layernorm_weight = torch.nn.Parameter(torch.ones(Q_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.kv_a_layernorm_weight = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.ckv_scale = torch.full((1,), 1 / 40.0)
        self.ckv_scale_reci = torch.reciprocal(self.ckv_scale)
        self.fa_ops = torch.ops.npu

    def forward(self, hidden_states, cos, sin, slot_mapping, nope_cache, rope_cache, block_table):
        num_tokens = hidden_states.shape[0]
        cos = cos.view(-1, ROPE)
        sin = sin.view(-1, ROPE)
        block_num, block_size, key_head_num, cache_dim = nope_cache.size()
        hidden_states_int8, pertoken_scale = torch_npu.npu_dynamic_quant(hidden_states)
        pertoken_scale = pertoken_scale.view(-1, 1)
        q_nope, q_pe, dequant_scale_q_nope, _, _ = torch.ops.npu.npu_mla_prolog_v3(
            token_x=hidden_states_int8,
            weight_dq=self.q_a_proj_weight, weight_uq_qr=self.q_b_proj_weight,
            weight_uk=self.kv_b_proj_w_k, weight_dkv_kr=self.kv_a_proj_with_mqa_weight,
            rmsnorm_gamma_cq=self.q_a_layernorm_weight,
            rmsnorm_gamma_ckv=self.kv_a_layernorm_weight,
            rope_sin=sin, rope_cos=cos,
            cache_index=slot_mapping,
            kv_cache=nope_cache,
            kr_cache=rope_cache,
            dequant_scale_x=pertoken_scale,
            dequant_scale_w_dq=self.q_a_proj_weight_scale.view(1, -1),
            dequant_scale_w_uq_qr=self.q_b_proj_weight_scale.view(1, -1),
            dequant_scale_w_dkv_kr=self.kv_a_proj_with_mqa_weight_scale.view(1, -1),
            quant_scale_ckv=self.ckv_scale_reci,
            quant_scale_ckr=None,
            smooth_scales_cq=None,
            rmsnorm_epsilon_cq=EPS,
            rmsnorm_epsilon_ckv=EPS,
            cache_mode="PA_NZ",
            weight_quant_mode=2,
            kv_cache_quant_mode=1,
            query_quant_mode=1,
        )
        k_nope, k_rope = nope_cache, rope_cache
        factor = 2
        KV_CACHE_NZ_DIM = 16
        k_nope = k_nope.view(block_num, 1, KV_LORA // (KV_CACHE_NZ_DIM * factor), block_size, KV_CACHE_NZ_DIM * factor)
        k_rope = k_rope.view(block_num, 1, ROPE // KV_CACHE_NZ_DIM, block_size, KV_CACHE_NZ_DIM)
        dequant_scale_query = dequant_scale_q_nope.view(num_tokens, -1)
        attn_output, _ = self.fa_ops.npu_fused_infer_attention_score_v2(
            q_nope, k_nope, k_nope,
            query_rope=q_pe, key_rope=k_rope,
            atten_mask=None,
            actual_seq_kvlen=KV_LENS,
            actual_seq_qlen=Q_ENDS,
            block_table=block_table,
            dequant_scale_query=dequant_scale_query,
            dequant_scale_key=self.ckv_scale,
            dequant_scale_value=self.ckv_scale,
            num_query_heads=HEADS,
            num_key_value_heads=1,
            softmax_scale=(NOPE + ROPE) ** -0.5,
            input_layout="TND_NTD",
            sparse_mode=0,
            block_size=block_size,
            query_quant_mode=3,
            key_quant_mode=0, value_quant_mode=0,
        )
        return attn_output


def decode_step():
    gen = torch.Generator().manual_seed(10)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, 1, 1, ROPE, generator=gen) * 3
    slot_mapping = torch.tensor([3, 18, 29, 44], dtype=torch.int64).npu()
    nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, KV_LORA, dtype=torch.int8).npu()
    rope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, ROPE, dtype=torch.bfloat16).npu()
    block_table = torch.tensor([[0], [1], [1], [2]], dtype=torch.int32).npu()
    cos, sin = angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu()
    return hidden, cos, sin, slot_mapping, nope_cache, rope_cache, block_table


def test_deepseek_r1_mla_prolog_v3_int8_nz_decode(npufuse):
    report = npufuse.check(DeepseekR1MlaPrologInt8(), *decode_step())
    kernels = [k.op_type for k in report.variant.kernels]
    assert kernels.count("npu::npu_mla_prolog_v3_functional") == 1
    assert kernels.count("npu::npu_fused_infer_attention_score_v2") == 1
    out = DeepseekR1MlaPrologInt8()(*decode_step())
    assert out.shape == (HEADS, TOKENS, KV_LORA) and out.dtype == torch.bfloat16 and bool(out.isfinite().all())
