"""vllm-ascend MLA decode writing FRACTAL_NZ KV caches: the enable_kv_nz KV path and the fa_quant int8 prolog.

Reconstruction of the call patterns (not copies) of vllm-project/vllm-ascend
@ 182b75ea84ff13ece27b57391331ef8935410aea:

* vllm_ascend/attention/mla_v1.py ``exec_kv_decode`` with ``enable_kv_nz``: the latent viewed [B, N, S, D]
  and ``npu_kv_rmsnorm_rope_cache(kv, kv_a_layernorm.weight, cos, sin, slots.to(torch.int64), kv_cache[1],
  kv_cache[0], c_kv_scale=None, epsilon=..., cache_mode="PA_NZ")``, returning ``k_pe, k_nope`` (the caches);
  ``_forward_decode`` then views them as the NZ blocks ``(-1, kv_heads, D // 16, block_size, 16)``.
* vllm_ascend/device/device_op.py ``mla_preprocess_only_decode`` (``fa_quant_layer`` branch, A2/A3):
  ``npu_dynamic_quant(hidden_states)``, then ``npu_mla_prolog_v2(quantized_x, wd_q, wu_q, W_UK_T, wd_kv,
  gamma1, gamma2, sin, cos, slot_mapping[:bsz].to(torch.int64), k_nope, k_pe,
  dequant_scale_x=pertoken_scale.view(-1, 1), dequant_scale_w_dq=..., dequant_scale_w_uq_qr=...,
  dequant_scale_w_dkv_kr=..., quant_scale_ckv=quant_kscale, cache_mode="PA_NZ")`` with int8 weights,
  an int8 k_nope cache and a bfloat16 k_pe cache; mla_v1.py views the int8 cache with 32-value NZ runs
  ``(-1, kv_heads, D // 32, block_size, 32)`` and the rope cache with 16. ``quant_kscale`` is
  ``1 / fa_k_scale`` repeated over kv_lora (quantization/methods/kv_c8.py).

Both originals continue with ``npu_fused_infer_attention_score_v2`` on the NZ views; the fragments stop
before it. Scaffolding: the layer's weights are plain tensors (the int8 ones with per-channel scales).
Shrunk: hidden 256, q_lora 64, 4 heads, nope 32, rope 32, kv_lora 64.
"""

import pytest
import torch
import torch_npu

HIDDEN, Q_LORA, HEADS, NOPE, ROPE, KV_LORA = 256, 64, 4, 32, 32, 64
BLOCKS, BLOCK_SIZE, TOKENS, KV_HEADS = 3, 16, 4, 1
EPS = 1e-6


def _int8(gen: torch.Generator, *shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randint(-127, 128, shape, generator=gen, dtype=torch.int8), requires_grad=False)


def _channel_scale(gen: torch.Generator, columns: int) -> torch.nn.Parameter:
    return torch.nn.Parameter((torch.rand(columns, generator=gen) / 2000).view(1, -1).to(torch.float),
                              requires_grad=False)


class MlaKvNzDecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(51)
        # --- scaffolding: kv_a_proj and kv_a_layernorm of the layer ---
        self.kv_a_proj = torch.nn.Parameter((torch.randn(HIDDEN, KV_LORA + ROPE, generator=gen) / 16).bfloat16(),
                                            requires_grad=False)
        self.kv_a_layernorm_weight = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)

    def exec_kv_decode(self, kv_no_split, cos, sin, kv_cache, slots):
        B = kv_no_split.shape[0]
        N = KV_HEADS
        S = 1
        kv_no_split = kv_no_split.view(B, N, S, KV_LORA + ROPE)
        cache_mode = "PA_NZ"
        c_kv_scale = None
        k_pe, k_nope, _, _ = torch_npu.npu_kv_rmsnorm_rope_cache(
            kv_no_split, self.kv_a_layernorm_weight, cos, sin, slots.to(torch.int64), kv_cache[1], kv_cache[0],
            c_kv_scale=c_kv_scale, epsilon=EPS, cache_mode=cache_mode,
        )
        return k_pe, k_nope

    def forward(self, hidden_states, cos, sin, k_nope_cache, k_pe_cache, slots):
        kv_no_split = hidden_states @ self.kv_a_proj
        k_pe, k_nope = self.exec_kv_decode(kv_no_split, cos, sin, (k_nope_cache, k_pe_cache), slots)
        nz_fmt_last_dim = 16
        k_nope = k_nope.view(-1, KV_HEADS, KV_LORA // nz_fmt_last_dim, BLOCK_SIZE, nz_fmt_last_dim)
        k_pe = k_pe.view(-1, KV_HEADS, ROPE // nz_fmt_last_dim, BLOCK_SIZE, nz_fmt_last_dim)
        return k_nope, k_pe


class FaQuantMlaPrologDecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(52)
        # --- scaffolding: the fa_quant layer's int8 weights, their per-channel scales and the C8 k scale ---
        self.wd_q, self.dequant_scale_w_dq = _int8(gen, HIDDEN, Q_LORA), _channel_scale(gen, Q_LORA)
        self.wu_q = _int8(gen, Q_LORA, HEADS * (NOPE + ROPE))
        self.dequant_scale_w_uq_qr = _channel_scale(gen, HEADS * (NOPE + ROPE))
        self.wd_kv, self.dequant_scale_w_dkv_kr = _int8(gen, HIDDEN, KV_LORA + ROPE), _channel_scale(gen, KV_LORA + ROPE)
        self.W_UK_T = torch.nn.Parameter((torch.randn(HEADS, NOPE, KV_LORA, generator=gen) / 6).bfloat16(),
                                         requires_grad=False)
        self.gamma1 = torch.nn.Parameter(torch.ones(Q_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.gamma2 = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)
        fa_k_scale = torch.tensor([0.02])
        self.quant_kscale = 1.0 / fa_k_scale.repeat(KV_LORA).view(1, KV_LORA).to(torch.float)

    def forward(self, hidden_states, decode_cos, decode_sin, slot_mapping, k_nope_cache, k_pe_cache):
        bsz = hidden_states.shape[0]
        hidden_states = hidden_states[:bsz]
        cos_shape = decode_cos.shape
        cos = decode_cos.view(cos_shape[0], cos_shape[-1])
        sin = decode_sin.view(cos_shape[0], cos_shape[-1])
        decode_k_nope, decode_k_pe = k_nope_cache, k_pe_cache
        quantized_x, pertoken_scale = torch_npu.npu_dynamic_quant(hidden_states)
        decode_q_nope, decode_q_pe, decode_k_nope, decode_k_pe, dequant_scale_q_nope = torch_npu.npu_mla_prolog_v2(
            quantized_x, self.wd_q, self.wu_q, self.W_UK_T, self.wd_kv, self.gamma1, self.gamma2, sin, cos,
            slot_mapping[:bsz].to(torch.int64), decode_k_nope, decode_k_pe,
            dequant_scale_x=pertoken_scale.view(-1, 1),
            dequant_scale_w_dq=self.dequant_scale_w_dq,
            dequant_scale_w_uq_qr=self.dequant_scale_w_uq_qr,
            dequant_scale_w_dkv_kr=self.dequant_scale_w_dkv_kr,
            quant_scale_ckv=self.quant_kscale,
            cache_mode="PA_NZ",
        )
        nz_fmt_last_dim = 16
        k_nope = decode_k_nope.view(-1, KV_HEADS, KV_LORA // (nz_fmt_last_dim * 2), BLOCK_SIZE, nz_fmt_last_dim * 2)
        k_pe = decode_k_pe.view(-1, KV_HEADS, ROPE // nz_fmt_last_dim, BLOCK_SIZE, nz_fmt_last_dim)
        dequant_scale_q_nope = dequant_scale_q_nope.view(bsz, 1, HEADS)
        return decode_q_nope, decode_q_pe, k_nope, k_pe, dequant_scale_q_nope


def _decode_inputs(cache_dtype: torch.dtype):
    gen = torch.Generator().manual_seed(9)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, 1, 1, ROPE, generator=gen) * 3
    slots = torch.tensor([1, 18, 35, 46], dtype=torch.int32).npu()
    k_nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, KV_LORA, dtype=cache_dtype).npu()
    k_pe_cache = torch.zeros(BLOCKS, BLOCK_SIZE, KV_HEADS, ROPE, dtype=torch.bfloat16).npu()
    return hidden, angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu(), slots, k_nope_cache, k_pe_cache


def test_kv_nz_decode_cache_write(npufuse):
    hidden, cos, sin, slots, k_nope_cache, k_pe_cache = _decode_inputs(torch.bfloat16)
    npufuse.check(MlaKvNzDecode(), hidden, cos, sin, k_nope_cache, k_pe_cache, slots)


def test_fa_quant_mla_prolog_v2_int8_nz_decode(npufuse):
    hidden, cos, sin, slots, k_nope_cache, k_pe_cache = _decode_inputs(torch.int8)
    report = npufuse.check(FaQuantMlaPrologDecode(), hidden, cos, sin, slots, k_nope_cache, k_pe_cache)
    assert [k.op_type for k in report.variant.kernels].count("npu::npu_mla_prolog_v2") == 1
