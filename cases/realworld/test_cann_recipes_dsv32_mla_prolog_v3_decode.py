"""DeepSeek-V3.2 decode MLA prolog: one npu_mla_prolog_v3 with query_norm for the indexer, W8 q_b projection.

Reconstruction of the call pattern (not a copy) of
hicann/cann-recipes-infer, models/deepseek_v3_2_exp/models/modeling_deepseek.py
@ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (the decode branch of the attention's ``prepare_qkv``):
cos/sin viewed ``(-1, 1, 1, rope)`` and squeezed back to ``[T, rope]``, an argument dict with
``token_x`` [T, He], the four weights, both RmsNorm gammas, ``kv_cache``/``kr_cache`` (the paged
nope/rope caches), ``cache_index = slot_mapping.view(-1)``, ``dequant_scale_w_uq_qr =
q_b_proj.weight_scale.view(1, -1)``, both epsilons, ``cache_mode="PA_BSND"``, ``query_norm_flag=True`` and
``weight_quant_mode=1`` (quantised config: only q_b_proj is int8), passed as
``torch_npu.npu_mla_prolog_v3(**args)`` whose five outputs are ``q_nope, q_pe, dequant_scale_q_nope, qr,
dequant_q_norm``; with weight_quant_mode 1 the indexer gets ``pertoken_scale = dequant_q_norm``.
Not reproduced: the int8 C8 kv cache (kv_cache_quant_mode 3, merged cache/scale storage), which the op
library refuses. Scaffolding: the layer's projections are plain parameters. Shrunk: He 256, q_lora 64,
4 heads, nope 32, rope 16, kv_lora 64.
"""

import pytest
import torch
import torch_npu

HIDDEN, Q_LORA, HEADS, NOPE, ROPE, KV_LORA = 256, 64, 4, 32, 16, 64
BLOCKS, BLOCK_SIZE, TOKENS = 3, 16, 4
EPS = 1e-6


class Dsv32MlaPrologDecode(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(32)

        def weight(*shape: int) -> torch.nn.Parameter:
            return torch.nn.Parameter((torch.randn(*shape, generator=gen) / shape[-2] ** 0.5).bfloat16(),
                                      requires_grad=False)

        # --- scaffolding: the layer's q_a / q_b (W8) / kv_a projections, norms and absorbed W_UK ---
        self.q_a_proj_weight = weight(HIDDEN, Q_LORA)
        self.q_b_proj_weight = torch.nn.Parameter(
            torch.randint(-127, 128, (Q_LORA, HEADS * (NOPE + ROPE)), generator=gen, dtype=torch.int8),
            requires_grad=False)
        self.q_b_proj_weight_scale = torch.nn.Parameter(torch.rand(HEADS * (NOPE + ROPE), generator=gen) / 500,
                                                        requires_grad=False)
        self.kv_b_proj_w_k = weight(HEADS, NOPE, KV_LORA)
        self.kv_a_proj_weight = weight(HIDDEN, KV_LORA + ROPE)
        self.q_a_layernorm_weight = torch.nn.Parameter(torch.ones(Q_LORA, dtype=torch.bfloat16), requires_grad=False)
        self.kv_a_layernorm_weight = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, hidden_states, cos, sin, slot_mapping, nope_cache, rope_cache):
        cos = cos.view(-1, 1, 1, ROPE)
        sin = sin.view(-1, 1, 1, ROPE)
        dequant_scale_w_uq_qr = self.q_b_proj_weight_scale.view(1, -1)
        weight_quant_mode = 1
        mla_prolog_input_args = {
            "token_x": hidden_states,
            "weight_dq": self.q_a_proj_weight,
            "weight_uq_qr": self.q_b_proj_weight,
            "weight_uk": self.kv_b_proj_w_k,
            "weight_dkv_kr": self.kv_a_proj_weight,
            "rmsnorm_gamma_cq": self.q_a_layernorm_weight,
            "rmsnorm_gamma_ckv": self.kv_a_layernorm_weight,
            "rope_sin": sin.squeeze(1).squeeze(1),
            "rope_cos": cos.squeeze(1).squeeze(1),
            "kv_cache": nope_cache,
            "kr_cache": rope_cache,
            "cache_index": slot_mapping.view(-1),
            "dequant_scale_w_uq_qr": dequant_scale_w_uq_qr,
            "rmsnorm_epsilon_cq": EPS,
            "rmsnorm_epsilon_ckv": EPS,
            "cache_mode": "PA_BSND",
            "query_norm_flag": True,
            "weight_quant_mode": weight_quant_mode,
        }
        q_nope, q_pe, dequant_scale_q_nope, qr, dequant_q_norm = torch_npu.npu_mla_prolog_v3(
            **mla_prolog_input_args
        )
        c8_input_dict = {}
        if weight_quant_mode == 1:
            c8_input_dict.update({"pertoken_scale": dequant_q_norm})
        return q_nope, q_pe, qr, c8_input_dict["pertoken_scale"], nope_cache, rope_cache


def decode_step():
    gen = torch.Generator().manual_seed(6)
    hidden = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, ROPE, generator=gen) * 3
    slot_mapping = torch.tensor([[5], [16], [33], [47]], dtype=torch.int64).npu()
    nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, KV_LORA, dtype=torch.bfloat16).npu()
    rope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, ROPE, dtype=torch.bfloat16).npu()
    return hidden, angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu(), slot_mapping, nope_cache, rope_cache


def test_dsv32_decode_mla_prolog_v3(npufuse):
    report = npufuse.check(Dsv32MlaPrologDecode(), *decode_step())
    assert [k.op_type for k in report.variant.kernels].count("npu::npu_mla_prolog_v3_functional") == 1
