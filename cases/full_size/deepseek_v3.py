"""DeepSeek-V3 decode on one rank, at its real size, as hicann/cann-recipes-infer runs DeepSeek-R1/V3 decode.

Reconstruction of the call pattern (not a copy) of cann-recipes-infer ``models/deepseek_r1/models/
modeling_deepseek.py`` (``DeepseekV3Model.forward``, ``DeepseekV3DecoderLayer``, ``DeepseekV3Attention.
forward_page_attention_mla_prolog``, ``DeepseekV3MoE.forward`` / ``moe_infer_dispatch_combine``,
``DeepseekV3DenseMLP.forward_w8a8int8``) with the W8A8 + int8 KV cache ("a8w8c8") configuration:

- the decoder loop in one SuperKernel scope ``decode_layer`` with ``stream-fusion=1`` (multi-stream on);
- attention: ``npu_dynamic_quant`` then ``npu_mla_prolog_v3`` (PA_NZ caches, weight_quant_mode 2,
  kv_cache_quant_mode 1, query_quant_mode 1), ``npu_fused_infer_attention_score_v2`` (TND_NTD,
  query_quant_mode 3), ``npu_transpose_batchmatmul`` with W_UV, the W8A8 ``o_proj``;
- MoE: the fp32 router, ``npu_moe_gating_top_k`` (k 8, k_group 4, group_count 8, sigmoid, scaling 2.5); on
  GE stream "22" the shared expert's gate_up after waiting the top-k ids, its dequant-swiglu-quant after
  waiting the dispatched tokens and its down projection after waiting the routed experts; MC2
  ``npu_moe_distribute_dispatch_v2`` (quant_mode 2) -> W8A8 grouped matmuls -> ``combine_v2``;
- the first ``first_k_dense_replace`` layers run the W8A8 dense MLP.

Sizes come from the config dict (:mod:`.configs`); build it under ``init_empty_weights()``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Mapping

import torch

from pytest_npufuse import torch_npu, torchair

from .configs import Deployment
from .decoder import Decoder
from .parts import RoutedExperts, W8A8Linear, W8A8SwigluMLP, decode_tables, parameter

NZ = 16  # KV_CACHE_NZ_DIM: 32 bytes of an NZ fractal row in bf16


class Attention(torch.nn.Module):
    def __init__(self, config: Mapping[str, Any], deployment: Deployment, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        self.heads, self.nope, self.rope = heads, config["qk_nope_head_dim"], config["qk_rope_head_dim"]
        self.kv_lora, self.v_dim = config["kv_lora_rank"], config["v_head_dim"]
        self.q_a_proj = W8A8Linear(hidden, config["q_lora_rank"])
        self.q_b_proj = W8A8Linear(config["q_lora_rank"], heads * (self.nope + self.rope))
        self.kv_a_proj_with_mqa = W8A8Linear(hidden, self.kv_lora + self.rope)
        self.q_a_layernorm = parameter(config["q_lora_rank"])
        self.kv_a_layernorm = parameter(self.kv_lora)
        self.kv_b_proj_w_k = parameter(heads, self.nope, self.kv_lora)
        self.kv_b_proj_w_v = parameter(heads, self.kv_lora, self.v_dim)
        self.o_proj = W8A8Linear(heads * self.v_dim, hidden)
        self.ckv_scale = parameter(1, dtype=torch.float32)
        self.eps = config["rms_norm_eps"]
        self.block_size = deployment.block_size
        self.kv_lens = [deployment.context] * deployment.batch
        self.q_ends = list(range(1, deployment.batch + 1))

    def forward(self, x, cos, sin, slots, block_table, nope_cache, rope_cache):
        tokens = x.shape[0]
        blocks = nope_cache.shape[0]
        x_int8, pertoken = torch_npu.npu_dynamic_quant(x)
        q_nope, q_pe, q_scale, _, _ = torch.ops.npu.npu_mla_prolog_v3(
            token_x=x_int8, weight_dq=self.q_a_proj.weight, weight_uq_qr=self.q_b_proj.weight,
            weight_uk=self.kv_b_proj_w_k, weight_dkv_kr=self.kv_a_proj_with_mqa.weight,
            rmsnorm_gamma_cq=self.q_a_layernorm, rmsnorm_gamma_ckv=self.kv_a_layernorm, rope_sin=sin, rope_cos=cos,
            cache_index=slots, kv_cache=nope_cache, kr_cache=rope_cache, dequant_scale_x=pertoken.view(-1, 1),
            dequant_scale_w_dq=self.q_a_proj.weight_scale.view(1, -1),
            dequant_scale_w_uq_qr=self.q_b_proj.weight_scale.view(1, -1),
            dequant_scale_w_dkv_kr=self.kv_a_proj_with_mqa.weight_scale.view(1, -1),
            quant_scale_ckv=torch.reciprocal(self.ckv_scale), quant_scale_ckr=None, smooth_scales_cq=None,
            rmsnorm_epsilon_cq=self.eps, rmsnorm_epsilon_ckv=self.eps, cache_mode="PA_NZ", weight_quant_mode=2,
            kv_cache_quant_mode=1, query_quant_mode=1,
        )
        k_nope = nope_cache.view(blocks, 1, self.kv_lora // (NZ * 2), self.block_size, NZ * 2)
        k_rope = rope_cache.view(blocks, 1, self.rope // NZ, self.block_size, NZ)
        attn, _ = torch.ops.npu.npu_fused_infer_attention_score_v2(
            q_nope, k_nope, k_nope, query_rope=q_pe, key_rope=k_rope, atten_mask=None, actual_seq_kvlen=self.kv_lens,
            actual_seq_qlen=self.q_ends, block_table=block_table, dequant_scale_query=q_scale.view(tokens, -1),
            dequant_scale_key=self.ckv_scale, dequant_scale_value=self.ckv_scale, num_query_heads=self.heads,
            num_key_value_heads=1, softmax_scale=(self.nope + self.rope) ** -0.5, input_layout="TND_NTD",
            sparse_mode=0, block_size=self.block_size, query_quant_mode=3, key_quant_mode=0, value_quant_mode=0,
        )
        out = torch_npu.npu_transpose_batchmatmul(attn, self.kv_b_proj_w_v, perm_x1=(0, 1, 2), perm_x2=(0, 1, 2),
                                                  perm_y=(1, 0, 2))
        return self.o_proj(out.reshape(tokens, -1))[0]


class MoE(torch.nn.Module):
    def __init__(self, config: Mapping[str, Any], deployment: Deployment) -> None:
        super().__init__()
        hidden, inter = config["hidden_size"], config["moe_intermediate_size"]
        self.experts_total, self.top_k = config["n_routed_experts"], config["num_experts_per_tok"]
        self.n_group, self.topk_group = config["n_group"], config["topk_group"]
        self.scaling = config["routed_scaling_factor"]
        self.stream = deployment.shared_stream
        self.gate = parameter(hidden, self.experts_total, dtype=torch.float32)
        self.e_score_correction_bias = parameter(self.experts_total, dtype=torch.float32)
        self.experts = RoutedExperts(hidden, inter, self.experts_total, deployment.ep)
        self.shared_experts = W8A8SwigluMLP(hidden, inter * config["n_shared_experts"])

    def _side(self):
        return torchair.scope.npu_stream_switch(self.stream) if self.stream else contextlib.nullcontext()

    def _wait(self, x: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
        return torchair.scope.npu_wait_tensor(x, dependency) if self.stream else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x.float() @ self.gate
        weights, ids, _ = torch_npu.npu_moe_gating_top_k(
            logits, k=self.top_k, bias=self.e_score_correction_bias, k_group=self.topk_group, group_count=self.n_group,
            group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=self.scaling, eps=float(1e-20))
        ids = ids.to(torch.int32)
        with self._side():
            merged, shared_scale = self.shared_experts.gate_up(self._wait(x, ids))
        dispatched = self.experts.dispatch(x, ids)
        expand_x, dynamic_scale, counts = dispatched[0], dispatched[1], dispatched[3]
        with self._side():
            act, act_scale = self.shared_experts.act(self._wait(merged, expand_x), shared_scale)
        down = self.experts.compute(expand_x, dynamic_scale, counts)
        routed = self.experts.combine(down, ids, weights, dispatched)
        with self._side():
            shared = self.shared_experts.down(self._wait(act, down), act_scale)
        return routed + shared


def DeepseekV3(config: Mapping[str, Any], deployment: Deployment) -> Decoder:
    """One decode step of ``deployment.batch`` sequences on one rank: MLA attention in every layer, the dense
    MLP in the first ``first_k_dense_replace`` layers and the MoE in the rest."""

    def mlp(layer: int) -> torch.nn.Module:
        if layer < config["first_k_dense_replace"]:
            return W8A8SwigluMLP(config["hidden_size"], config["intermediate_size"])
        return MoE(config, deployment)

    return Decoder(config, deployment, lambda layer: Attention(config, deployment, layer), mlp,
                   rope_dim=config["qk_rope_head_dim"])


def decode_inputs(config: Mapping[str, Any], deployment: Deployment) -> tuple[Any, ...]:
    """One decode step's inputs: the token ids, positions, slots and block table are real (small); the
    per-layer KV caches (int8 latent, bf16 rope, paged) are on the meta device at their real size."""
    block_table, slots, blocks = decode_tables(deployment.batch, deployment.context, deployment.block_size)
    tokens = deployment.batch
    input_ids = torch.zeros(tokens, dtype=torch.int64, device="cpu")
    positions = torch.full((tokens,), deployment.context - 1, dtype=torch.int64, device="cpu")
    caches = [
        (torch.empty(blocks, deployment.block_size, 1, config["kv_lora_rank"], dtype=torch.int8, device="meta"),
         torch.empty(blocks, deployment.block_size, 1, config["qk_rope_head_dim"], dtype=torch.bfloat16, device="meta"))
        for _ in range(config["num_hidden_layers"])
    ]
    return input_ids, positions, slots, block_table, caches
