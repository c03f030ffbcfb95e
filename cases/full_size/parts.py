"""Pieces the full-size models share: the RMSNorm with a fused residual add, W8A8 linear layers, and the
paged KV cache inputs of a decode step, written with the torch_npu calls the Ascend recipes use.

Parameters are created with ``torch.empty``: the models are built under ``init_empty_weights()`` (meta
tensors, nothing allocated) and a sampled layer gets seeded values when its numerics are computed.
"""

from __future__ import annotations

import torch

from pytest_npufuse import torch_npu


def parameter(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class RMSNorm(torch.nn.Module):
    """``npu_rms_norm``, or ``npu_add_rms_norm`` with the residual stream when one is given (the
    recipes' ``DeepseekV3RMSNorm`` / ``Qwen3MoeRMSNorm`` forms); returns (normed, residual)."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = parameter(hidden)
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            return torch_npu.npu_rms_norm(x, self.weight, self.eps)[0], x
        normed, _, added = torch_npu.npu_add_rms_norm(residual, x, self.weight, self.eps)
        return normed, added


class W8A8Linear(torch.nn.Module):
    """An int8 weight ``[K, N]`` with per-channel scales: dynamic per-token quantisation of the input, then
    ``npu_quant_matmul`` (the recipes' W8A8 ``ReplicatedLinear``/``RowParallelLinear``). ``int32=True`` keeps
    the raw accumulator for a following ``npu_dequant_swiglu_quant``, as the recipes' gate_up projections do."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.weight = parameter(k, n, dtype=torch.int8)
        self.weight_scale = parameter(n, dtype=torch.float32)

    def forward(self, x: torch.Tensor, int32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        quantized, scale = torch_npu.npu_dynamic_quant(x)
        return self.quantized(quantized, scale, int32), scale

    def quantized(self, x: torch.Tensor, scale: torch.Tensor, int32: bool = False) -> torch.Tensor:
        """The product of an input already quantised to int8 with its per-token ``scale``."""
        if int32:
            return torch_npu.npu_quant_matmul(x, self.weight, self.weight_scale, output_dtype=torch.int32)
        return torch_npu.npu_quant_matmul(x, self.weight, self.weight_scale, pertoken_scale=scale,
                                          output_dtype=torch.bfloat16)


class W8A8SwigluMLP(torch.nn.Module):
    """gate_up (int32) -> ``npu_dequant_swiglu_quant`` -> down: the recipes' W8A8 dense MLP and shared expert."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = W8A8Linear(hidden, 2 * intermediate)
        self.down_proj = W8A8Linear(intermediate, hidden)

    def gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.gate_up_proj(x, int32=True)

    def act(self, merged: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch_npu.npu_dequant_swiglu_quant(
            merged, weight_scale=self.gate_up_proj.weight_scale, activation_scale=scale, activate_left=True,
            quant_mode=1)

    def down(self, act: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.down_proj.quantized(act, scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(*self.act(*self.gate_up(x)))


def decode_tables(batch: int, context: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Block table ``[batch, blocks per sequence]`` (sequence b owns a contiguous run of blocks), the slot of
    each sequence's new token (its last position), and the number of blocks the caches need."""
    per_sequence = -(-context // block_size)
    block_table = torch.arange(batch * per_sequence, dtype=torch.int32, device="cpu").view(batch, per_sequence)
    last = context - 1
    slots = block_table[:, last // block_size].to(torch.int64) * block_size + last % block_size
    return block_table, slots, batch * per_sequence
