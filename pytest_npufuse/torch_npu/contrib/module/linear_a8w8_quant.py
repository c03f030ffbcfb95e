"""``LinearA8W8Quant``: the older name of :class:`LinearQuant`, which also checks its parameters' dtypes.

torch_npu deprecates it (a FutureWarning when built) in favour of ``LinearQuant``; it computes the same,
after refusing a scale, offset, bias, per-token scale or output dtype npu_quant_matmul's int8 path
does not take.

Source: Ascend/pytorch ``torch_npu/contrib/module/linear_a8w8_quant.py`` at ``9e73e708ab93``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from ....errors import OpArgumentError
from .linear_quant import QuantLinearBase

# The dtypes LinearA8W8Quant accepts for each parameter that is set (torch_npu's module).
ALLOWED_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "scale": (torch.int64, torch.float32, torch.bfloat16),
    "offset": (torch.float32,),
    "bias": (torch.int32, torch.bfloat16, torch.float16, torch.float32),
    "pertoken_scale": (torch.float32,),
}
OUTPUT_DTYPES = (torch.int8, torch.float16, torch.bfloat16)


def _names(dtypes: Sequence[torch.dtype]) -> str:
    return ", ".join(str(dtype) for dtype in dtypes)


class LinearA8W8Quant(QuantLinearBase):
    """The deprecated W8A8 Linear layer: :class:`LinearQuant` with dtype checks on its parameters
    (``scale`` int64/float32/bfloat16, ``offset`` and ``pertoken_scale`` float32, ``bias``
    int32/bfloat16/float16/float32, ``output_dtype`` None/int8/float16/bfloat16)."""

    replaced_by = "LinearQuant"

    def check_operands(self, x: Tensor) -> None:
        super().check_operands(x)
        for name, allowed in ALLOWED_DTYPES.items():
            value: Optional[Tensor] = getattr(self, name)
            if value is not None and value.dtype not in allowed:
                raise OpArgumentError(
                    f"LinearA8W8Quant: {name} is {value.dtype}; expected one of {_names(allowed)}",
                    op="LinearA8W8Quant", argument=name,
                )
        if self.output_dtype is not None and self.output_dtype not in OUTPUT_DTYPES:
            raise OpArgumentError(
                f"LinearA8W8Quant: output_dtype={self.output_dtype}; expected None or one of {_names(OUTPUT_DTYPES)}",
                op="LinearA8W8Quant", argument="output_dtype"
            )
