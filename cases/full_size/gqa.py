"""The grouped-query-attention decoders (Qwen3-MoE, Llama-3): paged KV cache, one new token per sequence.

Reconstruction of the decode call pattern (not a copy) of cann-recipes-infer ``models/qwen3_moe/models/
modeling_qwen3_moe.py`` (commit 1550b70, ``Qwen3MoeAttention.exec_qkv`` / ``kv_cache_update``): the merged
QKV projection, per-head ``q_norm``/``k_norm`` (Qwen3 only), ``npu_apply_rotary_pos_emb`` in the TND
layout, the new key and value written into the paged caches with ``npu_scatter_nd_update_``,
``npu_fused_infer_attention_score_v2`` (TND, ``block_table``) over the caches, the output projection.
Attention heads are split over ``deployment.tp`` ranks (this rank's share is modeled).

The projections are modules with a ``project(x) -> Tensor`` method (:mod:`.parts`), so a model picks
W8A8 or bf16 weights and whether a projection ends in a tensor-parallel all-reduce.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from pytest_npufuse import torch_npu

from .configs import Deployment
from .decoder import Block, Decoder
from .parts import RMSNorm, decode_tables

Projection = Callable[[int, int], torch.nn.Module]  # (in features, out features) -> a module with .project


class Attention(torch.nn.Module):
    def __init__(self, config: Mapping[str, Any], deployment: Deployment, layer_idx: int, projection: Projection,
                 output: Projection, qk_norm: bool) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        hidden = config["hidden_size"]
        self.head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
        self.heads = config["num_attention_heads"] // deployment.tp
        self.kv_heads = max(config["num_key_value_heads"] // deployment.tp, 1)
        self.merged_qkv_proj = projection(hidden, (self.heads + 2 * self.kv_heads) * self.head_dim)
        self.o_proj = output(self.heads * self.head_dim, hidden)
        self.q_norm = RMSNorm(self.head_dim, config["rms_norm_eps"]) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, config["rms_norm_eps"]) if qk_norm else None
        self.block_size = deployment.block_size
        self.kv_lens = [deployment.context] * deployment.batch
        self.q_ends = list(range(1, deployment.batch + 1))

    def forward(self, x, cos, sin, slots, block_table, k_cache, v_cache):
        tokens = x.shape[0]
        cos, sin = cos.view(tokens, 1, -1), sin.view(tokens, 1, -1)  # TND: one head of tables per token
        qkv = self.merged_qkv_proj.project(x)
        q, k, v = qkv.split((self.heads * self.head_dim, self.kv_heads * self.head_dim,
                             self.kv_heads * self.head_dim), dim=1)
        q = q.reshape(tokens, self.heads, self.head_dim)
        k = k.reshape(tokens, self.kv_heads, self.head_dim)
        v = v.reshape(tokens, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q)[0], self.k_norm(k)[0]
        q, k = torch_npu.npu_apply_rotary_pos_emb(q, k, cos, sin, layout="TND")
        rows = slots.view(-1, 1)
        torch_npu.npu_scatter_nd_update_(k_cache.view(-1, self.kv_heads, self.head_dim), rows, k)
        torch_npu.npu_scatter_nd_update_(v_cache.view(-1, self.kv_heads, self.head_dim), rows, v)
        attn, _ = torch.ops.npu.npu_fused_infer_attention_score_v2(
            q, k_cache, v_cache, num_query_heads=self.heads, num_key_value_heads=self.kv_heads,
            softmax_scale=self.head_dim ** -0.5, input_layout="TND", sparse_mode=0, actual_seq_qlen=self.q_ends,
            actual_seq_kvlen=self.kv_lens, block_table=block_table, block_size=self.block_size,
        )
        return self.o_proj.project(attn.reshape(tokens, -1))


def gqa_decoder(config: Mapping[str, Any], deployment: Deployment, projection: Projection, output: Projection,
                mlp: Block, qk_norm: bool) -> Decoder:
    """The decode step of a GQA model: :class:`Attention` in every layer, ``mlp(layer)`` after it."""
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    return Decoder(config, deployment, lambda layer: Attention(config, deployment, layer, projection, output, qk_norm),
                   mlp, rope_dim=head_dim)


def decode_inputs(config: Mapping[str, Any], deployment: Deployment) -> tuple[Any, ...]:
    """One decode step's inputs: token ids, positions, slots and block table real (small); each layer's paged
    key and value caches ``[blocks, block_size, kv heads x head dim]`` (bf16) on the meta device."""
    block_table, slots, blocks = decode_tables(deployment.batch, deployment.context, deployment.block_size)
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    width = max(config["num_key_value_heads"] // deployment.tp, 1) * head_dim
    tokens = deployment.batch
    input_ids = torch.zeros(tokens, dtype=torch.int64, device="cpu")
    positions = torch.full((tokens,), deployment.context - 1, dtype=torch.int64, device="cpu")
    caches = [
        tuple(torch.empty(blocks, deployment.block_size, width, dtype=torch.bfloat16, device="meta") for _ in range(2))
        for _ in range(config["num_hidden_layers"])
    ]
    return input_ids, positions, slots, block_table, caches
