"""Qwen3-235B-A22B decode on one rank, at its real size, as cann-recipes-infer runs Qwen3-MoE decode.

Reconstruction of the call pattern (not a copy) of cann-recipes-infer ``models/qwen3_moe/models/
modeling_qwen3_moe.py`` (commit 1550b70): W8A8 merged QKV and output projections, the attention of
:mod:`.gqa` with per-head q/k norms, every layer an MoE of 128 experts (no shared expert) whose router is
``npu_moe_gating_top_k_softmax`` (top 8, renormalised: ``norm_topk_prob``) and whose experts run the MC2
decode path (``moe_infer_dispatch_combine``: dispatch_v2, the W8A8 grouped matmuls, combine_v2); the decoder
loop in one ``decode_layer`` SuperKernel scope. Build it under ``init_empty_weights()``.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from pytest_npufuse import torch_npu

from .configs import Deployment
from .decoder import Decoder
from .gqa import decode_inputs, gqa_decoder  # noqa: F401  (decode_inputs: the model's inputs)
from .parts import RoutedExperts, W8A8Linear, parameter


class SparseMoeBlock(torch.nn.Module):
    def __init__(self, config: Mapping[str, Any], deployment: Deployment) -> None:
        super().__init__()
        hidden, experts = config["hidden_size"], config["num_experts"]
        self.top_k, self.renormalize = config["num_experts_per_tok"], config["norm_topk_prob"]
        self.gate = parameter(hidden, experts)
        self.experts = RoutedExperts(hidden, config["moe_intermediate_size"], experts, deployment.ep)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids, _ = torch_npu.npu_moe_gating_top_k_softmax(x @ self.gate, k=self.top_k)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return self.experts(x, ids.to(torch.int32), weights)


def Qwen3Moe(config: Mapping[str, Any], deployment: Deployment) -> Decoder:
    """The decode model of a Qwen3-MoE config (HF ``config.json`` keys) on one rank of ``deployment``."""
    return gqa_decoder(config, deployment, projection=W8A8Linear, output=W8A8Linear,
                   mlp=lambda layer: SparseMoeBlock(config, deployment), qk_norm=True)
