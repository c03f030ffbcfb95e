"""``torch_npu.contrib.module``: the quantised Linear layers (see :mod:`pytest_npufuse.torch_npu.contrib`)."""

from __future__ import annotations

from .linear_a8w8_quant import LinearA8W8Quant
from .linear_quant import LinearQuant
from .linear_weight_quant import LinearWeightQuant

__all__ = ["LinearA8W8Quant", "LinearQuant", "LinearWeightQuant"]
