"""The torch_npu ops ``torch_npu.onnx`` exports as one node of the ``npu`` ONNX domain each.

Each op of :data:`SYMBOLICS` is re-bound in the ``torch_npu`` package to a callable of the same signature
that runs the op through an autograd function; the TorchScript exporter calls the function's
``symbolic`` (one entry here) instead of tracing into the op. A symbolic takes the graph context and
the op's arguments in its declared order: tensors as graph values, everything else as Python values.
An optional tensor left out becomes an empty constant input where torch_npu's exporter puts one (the
node's inputs keep their positions), of the dtype torch_npu gives it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import torch

from ... import torch_npu as package
from ...errors import OpArgumentError

Symbolic = Callable[..., Any]

# ACL data type numbers (CANN aclDataType) of the dtypes torch_npu's exporter writes as attributes.
ACL_FLOAT16, ACL_INT8, ACL_INT32, ACL_UINT8, ACL_BF16 = 1, 2, 3, 4, 27


def _empty(g: Any, dtype: torch.dtype) -> Any:
    """The placeholder of an absent optional input: an empty constant of ``dtype``."""
    return g.op("Constant", value_t=torch.tensor([], dtype=dtype))


def _or_empty(g: Any, value: Any, dtype: torch.dtype) -> Any:
    return _empty(g, dtype) if value is None else value


def _fast_gelu(g: Any, x: Any) -> Any:
    return g.op("npu::NPUFastGelu", x)


def _gelu(g: Any, x: Any, approximate: str) -> Any:
    return g.op("npu::NPUGeluV2", x, approximate_s=approximate)


def _format_cast(g: Any, x: Any, acl_format: int) -> Any:
    return g.op("npu::NPUFormatCast", x, acl_format_i=acl_format)


def _scatter_nd_update(g: Any, x: Any, indices: Any, updates: Any) -> Any:
    return g.op("npu::NPUScatterNdUpdate", x, indices, updates)


def _rms_norm(g: Any, x: Any, gamma: Any, epsilon: float) -> Any:
    return g.op("npu::NPURmsNorm", x, gamma, epsilon_f=epsilon, outputs=2)


def _add_rms_norm(g: Any, x1: Any, x2: Any, gamma: Any, epsilon: float) -> Any:
    # torch_npu names the fused add's node NPURmsNorm too; its three inputs tell them apart
    return g.op("npu::NPURmsNorm", x1, x2, gamma, epsilon_f=epsilon, outputs=3)


def _scaled_masked_softmax(g: Any, x: Any, mask: Any, scale: float, fixed_triu_mask: bool) -> Any:
    return g.op("npu::NPUScaledMaskedSoftmax", x, mask, scale_f=scale, fixed_triu_mask_i=fixed_triu_mask)


def _rotary_mul(g: Any, x: Any, r1: Any, r2: Any, rotary_mode: str) -> Any:
    return g.op("npu::NPURotaryMul", x, r1, r2, rotary_mode_s=rotary_mode)


def _dynamic_quant(
    g: Any, x: Any, smooth_scales: Any, group_index: Any, dst_type: Optional[torch.dtype], quant_mode: str = "pertoken",
    dst_type_max: float = 0.0,
) -> Any:
    """NPUDynamicQuant; ``quant_mode``/``dst_type_max`` are at their defaults (the op refuses others), which the
    node does not carry."""
    scales = _or_empty(g, smooth_scales, x.type().dtype())
    groups = _or_empty(g, group_index, torch.int32)
    # int8 output, or int4 packed eight per int32
    code = ACL_INT8 if dst_type in (None, torch.int8) else ACL_INT32
    return g.op("npu::NPUDynamicQuant", x, scales, groups, dst_type_i=code, outputs=2)


_QUANTIZE_CODES = {torch.quint8: ACL_UINT8, torch.qint8: ACL_INT8, torch.qint32: ACL_INT32}


def _quantize(g: Any, x: Any, scales: Any, zero_points: Any, dtype: torch.dtype, axis: int, div_mode: bool) -> Any:
    if dtype not in _QUANTIZE_CODES:
        raise OpArgumentError(
            f"npu_quantize: torch_npu.onnx exports dtype torch.quint8, torch.qint8 or torch.qint32, not {dtype}"
        )
    return g.op(
        "npu::NPUQuantize", x, scales, zero_points, dtype_i=_QUANTIZE_CODES[dtype], axis_i=axis, div_mode_i=div_mode
    )


def _anti_quant(
    g: Any, x: Any, scale: Any, offset: Any, dst_dtype: Optional[torch.dtype], src_dtype: Optional[torch.dtype]
) -> Any:
    destination = {None: ACL_FLOAT16, torch.float16: ACL_FLOAT16, torch.bfloat16: ACL_BF16}
    if dst_dtype not in destination or src_dtype not in (None, torch.int8):
        raise OpArgumentError(
            "npu_anti_quant: torch_npu.onnx exports dst_dtype float16 or bfloat16 and src_dtype int8, "
            f"not {dst_dtype} and {src_dtype}"
        )
    return g.op(
        "npu::NPUAntiQuant", x, scale, _or_empty(g, offset, torch.float32),
        dst_dtype_i=destination[dst_dtype], src_dtype_i=ACL_INT8,
    )


def _weight_quant_batchmatmul(
    g: Any, x: Any, weight: Any, antiquant_scale: Any, antiquant_offset: Any, quant_scale: Any,
    quant_offset: Any, bias: Any, antiquant_group_size: int, inner_precise: int,
) -> Any:
    # the node's dtype attribute is the output's: float16, or int8 when the output is quantised
    output_code = ACL_FLOAT16 if quant_scale is None else ACL_INT8
    optional = [_or_empty(g, value, torch.float32) for value in (antiquant_offset, quant_scale, quant_offset, bias)]
    return g.op(
        "npu::NPUWeightQuantBatchMatmulV2", x, weight, antiquant_scale, *optional,
        antiquant_group_size_i=antiquant_group_size, dtype_i=output_code,
    )


def _moe_compute_expert_tokens(g: Any, sorted_experts: Any, num_experts: int) -> Any:
    return g.op("npu::NPUMoeComputeExpertTokens", sorted_experts, num_experts_i=num_experts)


def _moe_finalize_routing(
    g: Any, rows: Any, skip1: Any, skip2: Any, bias: Any, scales: Any, src_to_dst: Any, expert_for_row: Any,
    drop_pad_mode: Optional[int], k: Optional[int],
) -> Any:
    """torch_npu's first node when every input but ``skip2`` is given without drop/pad; else the V2 node,
    whose absent inputs are constants of their neutral value (zero skips and bias, unit scales)."""
    if None not in (skip1, bias, scales, expert_for_row) and not drop_pad_mode:
        return g.op(
            "npu::NPUMoeFinalizeRouting", rows, skip1, _or_empty(g, skip2, torch.float32), bias, scales,
            src_to_dst, expert_for_row,
        )
    sizes, dtype = rows.type().sizes(), rows.type().dtype()
    top_k = scales.type().sizes()[1] if scales is not None else 1
    tokens, hidden = sizes[0] // top_k, sizes[-1]

    def constant(value: Any, make: Callable[..., torch.Tensor], shape: list[int], kind: torch.dtype) -> Any:
        return value if value is not None else g.op("Constant", value_t=make(shape, dtype=kind))

    return g.op(
        "npu::NPUMoeFinalizeRoutingV2", rows, src_to_dst,
        constant(skip1, torch.zeros, [tokens, hidden], dtype), constant(skip2, torch.zeros, [tokens, hidden], dtype),
        constant(bias, torch.zeros, [1, hidden], dtype), constant(scales, torch.ones, [tokens, top_k], dtype),
        constant(expert_for_row, torch.zeros, [tokens, top_k], torch.int32), drop_pad_mode_i=drop_pad_mode or 0,
    )


SYMBOLICS: dict[str, Symbolic] = {
    "fast_gelu": _fast_gelu,
    "npu_fast_gelu": _fast_gelu,
    "npu_gelu": _gelu,
    "npu_format_cast": _format_cast,
    "npu_scatter_nd_update": _scatter_nd_update,
    "npu_rms_norm": _rms_norm,
    "npu_add_rms_norm": _add_rms_norm,
    "npu_scaled_masked_softmax": _scaled_masked_softmax,
    "npu_rotary_mul": _rotary_mul,
    "npu_dynamic_quant": _dynamic_quant,
    "npu_quantize": _quantize,
    "npu_anti_quant": _anti_quant,
    "npu_weight_quant_batchmatmul": _weight_quant_batchmatmul,
    "npu_moe_compute_expert_tokens": _moe_compute_expert_tokens,
    "npu_moe_finalize_routing": _moe_finalize_routing,
}


def exported(op: Callable[..., Any], symbolic: Symbolic) -> Callable[..., Any]:
    """``op`` with ``op``'s signature, run through an autograd function whose ``symbolic`` is ``symbolic``."""
    signature = inspect.signature(op)
    names = list(signature.parameters)

    def forward(ctx: Any, *values: Any) -> Any:
        return op(**dict(zip(names, values)))

    function = type(f"{op.__name__}_onnx", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "symbolic": staticmethod(symbolic),
    })

    @functools.wraps(op)
    def run(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return function.apply(*bound.arguments.values())

    return run


def export_as_custom_nodes() -> None:
    """Re-bind each op of :data:`SYMBOLICS` in the ``torch_npu`` package, as torch_npu.onnx does."""
    for name, symbolic in SYMBOLICS.items():
        setattr(package, name, exported(getattr(package, name), symbolic))
