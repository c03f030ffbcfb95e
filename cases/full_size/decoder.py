"""The decode step every bundled full-size model shares: embedding, the decoder layers (pre-norm attention
and MLP, the residual carried by the fused add-RMSNorm) inside the deployment's SuperKernel scope, the
final norm and the LM head. A model supplies its attention and each layer's MLP.

The attention modules take ``(x, cos, sin, slots, block_table, cache_a, cache_b)``, the two caches being the
layer's pair in the ``caches`` input (MLA: latent and rope; GQA: key and value).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping, Sequence

import torch

from pytest_npufuse import torchair

from .configs import Deployment
from .parts import RMSNorm, parameter

Block = Callable[[int], torch.nn.Module]  # layer index -> the layer's attention or MLP


class DecoderLayer(torch.nn.Module):
    def __init__(self, config: Mapping[str, Any], layer_idx: int, attention: torch.nn.Module,
                 mlp: torch.nn.Module) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = attention
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = mlp

    def forward(self, x, residual, cos, sin, slots, block_table, caches):
        first, second = caches[self.layer_idx]
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, cos, sin, slots, block_table, first, second)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class Decoder(torch.nn.Module):
    """One decode step of ``deployment.batch`` sequences on one rank; ``rope_dim`` is the width of the
    rotary tables the attention reads at each sequence's position."""

    def __init__(self, config: Mapping[str, Any], deployment: Deployment, attention: Block, mlp: Block,
                 rope_dim: int) -> None:
        super().__init__()
        self.config, self.deployment = dict(config), deployment
        hidden = config["hidden_size"]
        self.embed_tokens = torch.nn.Embedding(config["vocab_size"], hidden, dtype=torch.bfloat16)
        self.rope_cos = parameter(config["max_position_embeddings"], rope_dim)
        self.rope_sin = parameter(config["max_position_embeddings"], rope_dim)
        self.layers = torch.nn.ModuleList(
            DecoderLayer(config, i, attention(i), mlp(i)) for i in range(config["num_hidden_layers"])
        )
        self.norm = RMSNorm(hidden, config["rms_norm_eps"])
        self.lm_head = parameter(config["vocab_size"], hidden)

    def forward(self, input_ids, positions, slots, block_table, caches: Sequence[tuple[torch.Tensor, torch.Tensor]]):
        x = self.embed_tokens(input_ids)
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        residual = None
        deployment = self.deployment
        scope = (torchair.scope.super_kernel(deployment.superkernel, deployment.sk_options) if deployment.superkernel
                 else contextlib.nullcontext())
        with scope:
            for layer in self.layers:
                x, residual = layer(x, residual, cos, sin, slots, block_table, caches)
        x, _ = self.norm(x, residual)
        return x @ self.lm_head.t()
