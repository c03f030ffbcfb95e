"""Memory and layout ops: format casts (a layout change with no numeric effect on CPU)."""

from __future__ import annotations

import torch

from .checks import require_int, require_tensor
from .registry import Out, npu_op

FORMAT_CAST_DOC = "torch_npu.npu_format_cast, Ascend Extension for PyTorch API reference"


def _format_cast_meta(x: torch.Tensor, acl_format: int) -> Out:
    return Out(list(x.shape), x.dtype)


def _format_cast_kernel(x: torch.Tensor, acl_format: int) -> torch.Tensor:
    return x.clone()


@npu_op("(Tensor x, int acl_format) -> Tensor", source=FORMAT_CAST_DOC, meta=_format_cast_meta,
        kernel=_format_cast_kernel)
def npu_format_cast(x: torch.Tensor, acl_format: int) -> torch.Tensor:
    """Change the device memory format of ``x``; on CPU this returns a copy equal to ``x``.

    Source: torch_npu.npu_format_cast (Ascend Extension for PyTorch API reference) and the
    feature example, which casts the [k, n] int8 weight to format 29 (FRACTAL_NZ) before
    npu_quant_matmul.

    An ACL format such as 29 = FRACTAL_NZ (or 2 = ND) only changes how the NPU lays the
    tensor out in device memory, for example in fractal tiles for the Cube unit.  The logical
    shape, dtype and values stay the same, and every op in this module reads logical values.
    So the CPU model keeps the layout and returns a copy.  It copies rather than returning
    ``x`` itself because an op without alias annotations may not return its input, and the real op
    also returns a new tensor.  ``acl_format`` must be an int, as in the real schema.
    """
    require_tensor("x", x)
    require_int("acl_format", acl_format)
