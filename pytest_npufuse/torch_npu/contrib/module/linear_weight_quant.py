"""``LinearWeightQuant``: a Linear layer over ``npu_weight_quant_batchmatmul`` (W8A16 / W4A16).

The weight is stored quantised (int8, or int4 packed in int32) as ``[out_features, in_features]``; the
op dequantises it with ``antiquant_scale`` (and ``antiquant_offset``) per output channel, or per group of
``antiquant_group_size`` rows of K, and multiplies the float input by it. A 2-D (per-group) scale or
offset is stored ``[out_features, groups]`` and handed to the op transposed, as the op wants it.

Source: Ascend/pytorch ``torch_npu/contrib/module/linear_weight_quant.py`` at ``9e73e708ab93``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch.nn import Module

from ...quant import npu_weight_quant_batchmatmul
from .linear_quant import frozen_parameter

_PER_GROUP_DIMS = 2  # a [out_features, groups] scale or offset


def _op_layout(parameter: Optional[Tensor]) -> Optional[Tensor]:
    """A per-group parameter is stored ``[out, groups]``; the op takes ``[groups, out]``."""
    if parameter is not None and parameter.dim() == _PER_GROUP_DIMS:
        return parameter.transpose(-1, -2)
    return parameter


class LinearWeightQuant(Module):
    """``y = x @ dequant(weight).T (+ bias)`` with ``npu_weight_quant_batchmatmul``.

    Frozen parameters, each ``[out_features]`` unless a loader sets a per-group one: ``weight``
    ``[out_features, in_features]``, ``antiquant_scale``, and when asked for ``antiquant_offset``,
    ``quant_scale``, ``quant_offset`` and ``bias``. ``antiquant_group_size``, ``inner_precise`` and
    ``weight_dtype`` are passed to the op as they are (``weight_dtype`` only when set).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: object = None,
        dtype: Optional[torch.dtype] = None,
        antiquant_offset: bool = False,
        quant_scale: bool = False,
        quant_offset: bool = False,
        antiquant_group_size: int = 0,
        inner_precise: int = 0,
        weight_dtype: Optional[int] = None,
    ) -> None:
        """``dtype`` is accepted and unused, as in torch_npu: the loader's tensors decide."""
        super().__init__()
        self.weight = frozen_parameter(out_features, in_features, device=device)
        self.antiquant_scale = frozen_parameter(out_features, device=device)
        optional = {
            "antiquant_offset": antiquant_offset,
            "quant_scale": quant_scale,
            "quant_offset": quant_offset,
            "bias": bias,
        }
        for name, wanted in optional.items():
            self.register_parameter(name, frozen_parameter(out_features, device=device) if wanted else None)
        self.antiquant_group_size = antiquant_group_size
        self.inner_precise = inner_precise
        self.weight_dtype = weight_dtype

    def forward(self, x: Tensor) -> Tensor:
        options: dict[str, Any] = {} if self.weight_dtype is None else {"weight_dtype": self.weight_dtype}
        return npu_weight_quant_batchmatmul(
            x,
            self.weight.transpose(-1, -2),
            _op_layout(self.antiquant_scale),
            _op_layout(self.antiquant_offset),
            self.quant_scale,
            self.quant_offset,
            self.bias,
            self.antiquant_group_size,
            self.inner_precise,
            **options,
        )
