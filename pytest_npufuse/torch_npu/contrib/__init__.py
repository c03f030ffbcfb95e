"""``torch_npu.contrib``: torch_npu's ready-made modules built on its ops.

Of torch_npu's contrib tree this package provides the quantised Linear layers inference code loads
quantised checkpoints into (:mod:`.module`: ``LinearQuant``, ``LinearA8W8Quant``, ``LinearWeightQuant``),
each a thin ``torch.nn.Module`` over an op of this package, with torch_npu's constructor, parameter
names, shapes and ``forward``. The rest of the tree (detection helpers, fused dropouts, ``QuantConv2d``
over ``npu_quant_conv2d``) calls ops the model does not provide; docs/shim.md lists what is missing.

Source: Ascend/pytorch ``torch_npu/contrib/__init__.py`` and ``torch_npu/contrib/module/`` at ``9e73e708ab93``.
"""

from __future__ import annotations

from .module import LinearA8W8Quant, LinearQuant, LinearWeightQuant

__all__ = ["LinearA8W8Quant", "LinearQuant", "LinearWeightQuant"]
