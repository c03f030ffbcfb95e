"""``LinearQuant``: a Linear layer over ``npu_quant_matmul`` (W8A8, or W4A4 with int4 packed in int32).

The layer holds the quantised weight ``[out_features, in_features]`` and its dequantisation parameters
as frozen parameters that a loader overwrites (``model.weight.data = ...``); ``forward`` multiplies the
quantised input by the transposed weight. A float32 ``scale`` without ``pertoken_scale`` is first packed
by ``npu_trans_quant_param`` (with ``offset``) into the int64 form the int8 output path reads, except for
a bfloat16 or int32 output, which takes the float32 scale as it is.

Source: Ascend/pytorch ``torch_npu/contrib/module/linear_quant.py`` at ``9e73e708ab93`` (constructor,
parameter names and dtypes, the scale rule).
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from ...quant import npu_quant_matmul, npu_trans_quant_param
from ....errors import OpArgumentError

QUANT_INPUT_DTYPES = (torch.int8, torch.int32)  # int8, or int4 packed eight per int32
_TAKES_FLOAT_SCALE = (torch.bfloat16, torch.int32)  # outputs npu_quant_matmul dequantises with a float32 scale


def frozen_parameter(*size: int, dtype: Optional[torch.dtype] = None, device: object = None) -> Parameter:
    """A parameter a checkpoint fills in: never trained, so it needs no gradient."""
    return Parameter(torch.empty(size, dtype=dtype, device=device), requires_grad=False)


class QuantLinearBase(Module):
    """What LinearQuant and its deprecated twin LinearA8W8Quant share: their parameters and ``forward``."""

    in_features: int
    out_features: int
    weight: Tensor
    scale: Tensor
    offset: Optional[Tensor]
    pertoken_scale: Optional[Tensor]
    bias: Optional[Tensor]
    replaced_by: Optional[str] = None  # the class a deprecated one names in its FutureWarning

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        offset: bool = False,
        pertoken_scale: bool = False,
        device: object = None,
        dtype: Optional[torch.dtype] = None,
        output_dtype: Optional[torch.dtype] = None,
    ) -> None:
        """``device`` and ``dtype`` are accepted and unused, as in torch_npu: the loader's tensors decide."""
        if self.replaced_by is not None:
            warnings.warn(
                f"torch_npu.contrib.module.{type(self).__name__} is deprecated; use "
                f"torch_npu.contrib.module.{self.replaced_by}",
                FutureWarning,
                stacklevel=2,
            )
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.output_dtype = output_dtype
        self.weight = frozen_parameter(out_features, in_features)
        self.scale = frozen_parameter(out_features)
        optional = {
            "offset": (offset, torch.float32),
            "pertoken_scale": (pertoken_scale, torch.float32),
            "bias": (bias, torch.int32),
        }
        for name, (wanted, kind) in optional.items():
            self.register_parameter(name, frozen_parameter(out_features, dtype=kind) if wanted else None)

    def check_operands(self, x: Tensor) -> None:
        """The input and the weight are both int8 or both int32 (int4 packed)."""
        if x.dtype != self.weight.dtype or x.dtype not in QUANT_INPUT_DTYPES:
            raise OpArgumentError(
                f"{type(self).__name__}: input is {x.dtype} and weight is {self.weight.dtype}; both must be "
                "torch.int8, or both torch.int32 (int4 packed eight per int32)", op=type(self).__name__, argument="x"
            )

    def forward(self, x: Tensor) -> Tensor:
        self.check_operands(x)
        scale = self.scale
        if self.pertoken_scale is None and scale.dtype == torch.float32 and self.output_dtype not in _TAKES_FLOAT_SCALE:
            scale = npu_trans_quant_param(scale, self.offset)
        return npu_quant_matmul(
            x,
            self.weight.transpose(-2, -1),
            scale,
            offset=self.offset,
            pertoken_scale=self.pertoken_scale,
            bias=self.bias,
            output_dtype=self.output_dtype,
        )


class LinearQuant(QuantLinearBase):
    """``y = dequant(x @ weight.T)`` with ``npu_quant_matmul``: a Linear layer of a W8A8 (int8) or W4A4
    (int4 packed in int32) checkpoint.

    Frozen parameters: ``weight`` ``[out_features, in_features]``, ``scale`` ``[out_features]``, and when
    asked for, ``offset`` and ``pertoken_scale`` (float32) and ``bias`` (int32), each ``[out_features]``.
    ``output_dtype`` is npu_quant_matmul's (None: int8). See the module docstring for when the scale is
    packed.
    """
