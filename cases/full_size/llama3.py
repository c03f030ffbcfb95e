"""A dense Llama-3-70B-class decode step on one tensor-parallel rank, at its real size.

The attention of :mod:`.gqa` (no q/k norm) with bf16 weights, heads split over ``deployment.tp`` ranks;
the row-parallel projections (attention output, MLP down) end in the all-reduce of their partial sums,
written as ``npu_mm_all_reduce_base`` (MatmulAllReduce), the fused form vllm-ascend's row-parallel linear
layers can use; the MLP is gate_up -> ``npu_swiglu`` -> down, its intermediate size split over the TP
ranks. Build it under ``init_empty_weights()``.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from pytest_npufuse import torch_npu

from .configs import Deployment
from .decoder import Decoder
from .gqa import decode_inputs, gqa_decoder  # noqa: F401  (decode_inputs: the model's inputs)
from .parts import parameter


class Linear(torch.nn.Module):
    """A bf16 weight ``[K, N]``; ``all_reduce`` sums the product over the TP group (a row-parallel layer)."""

    def __init__(self, k: int, n: int, all_reduce: bool = False) -> None:
        super().__init__()
        self.weight = parameter(k, n)
        self.all_reduce = all_reduce

    def project(self, x: torch.Tensor) -> torch.Tensor:
        if self.all_reduce:
            return torch_npu.npu_mm_all_reduce_base(x, self.weight, "tp")
        return x @ self.weight


class MLP(torch.nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden, 2 * intermediate)
        self.down_proj = Linear(intermediate, hidden, all_reduce=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj.project(torch_npu.npu_swiglu(self.gate_up_proj.project(x)))


def Llama3(config: Mapping[str, Any], deployment: Deployment) -> Decoder:
    """The decode model of a Llama config (HF ``config.json`` keys) on one TP rank of ``deployment``."""
    intermediate = config["intermediate_size"] // deployment.tp
    return gqa_decoder(config, deployment, projection=Linear,
                   output=lambda k, n: Linear(k, n, all_reduce=deployment.tp > 1),
                   mlp=lambda layer: MLP(config["hidden_size"], intermediate), qk_norm=False)
