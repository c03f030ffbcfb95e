"""``torchair.experimental.inference``: casting a model's weights to the NPU's internal formats.

``use_internal_format_weight(model)`` casts the weight of every ``torch.nn.Linear`` in ``model`` (its
submodules included) to FRACTAL_NZ (ACL format 29) with ``torch_npu.npu_format_cast``, in place, so
matmuls read it without a format conversion on the device (Ascend/torchair
python/torchair/experimental/inference.py, commit fced8842). The model's ``npu_format_cast`` keeps the
logical values (a format only changes the device layout), so the weights compute as before.

``npu_format_cast_via_cpu`` is not modeled: reading it is an error naming it.
"""

import torch

from ...errors import NotModeledAttributeError
from ...torch_npu import npu_format_cast

__all__ = ["use_internal_format_weight"]

ACL_FORMAT_FRACTAL_NZ = 29  # source: torch_npu.npu_format_cast API reference (aclFormat 29 = FRACTAL_NZ)


def use_internal_format_weight(model: torch.nn.Module):
    """Cast the weight of each ``torch.nn.Linear`` in ``model`` to FRACTAL_NZ in place. The signature is
    TorchAir's as its API schema records it (no return annotation)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight.data = npu_format_cast(module.weight.data, ACL_FORMAT_FRACTAL_NZ)


def __getattr__(name: str):
    if name == "npu_format_cast_via_cpu":
        raise NotModeledAttributeError(
            "torchair.experimental.inference.npu_format_cast_via_cpu is not modeled by pytest-npufuse; cast "
            "with torch_npu.npu_format_cast(tensor, acl_format) on the modeled device instead.",
            op="torchair.experimental.inference.npu_format_cast_via_cpu"
        )
    raise AttributeError(f"module 'torchair.experimental.inference' has no attribute {name!r}")
