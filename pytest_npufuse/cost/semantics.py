"""The work an op's documented semantics demands, and the time no hardware can beat: its roofline floor.

Like ``torch.utils.flop_counter``'s registry of flop formulas, one formula per op type says what the op
must compute and move, read from its documented semantics (its layout, lengths, causal or sparse mode,
prefill or decode), not from how a cost rule prices it: Cube flops (matrix products), Vector flops
(element operations), HBM bytes and link bytes (a collective's message). An op without a formula of its
own takes its cost rule's family formula, where that rule's flops and bytes *are* the documented work
(an elementwise op's outputs times its operations, a matmul's ``2 x M x N x K``); a rule whose formula is
a proxy (``attention``'s ``2 x output x head dim``) has no family formula, so each op priced by it must
have its own here.

The floor of a kernel is ``max(Cube flops / Cube peak, Vector flops / Vector peak, HBM bytes / HBM
bandwidth, link bytes / link bandwidth)`` at the profile's peaks for the kernel's dtype, every efficiency
at 1: a modeled body below it is faster than the hardware, and one far above it (for a large shape)
prices work the op does not do. ``tests/cost/test_roofline.py`` checks every op of the catalog against it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

from . import attention, rules
from .registry import Work

if TYPE_CHECKING:
    from ..ir.op import OpInfo
    from ..target.profile import HardwareProfile


class OpWork(NamedTuple):
    """What one call must do: flops on the Cube and on the Vector units, bytes through HBM and over the link."""

    cube_flops: float = 0.0
    vector_flops: float = 0.0
    hbm_bytes: float = 0.0
    link_bytes: float = 0.0


Formula = Callable[[Work], OpWork]
_BY_OP: dict[str, Formula] = {}  # declarations, each made once at import (not session state)
_BY_RULE: dict[str, Formula] = {}


def register_op_work(*op_types: str) -> Callable[[Formula], Formula]:
    """Register ``formula`` as the documented work of each of ``op_types`` (``namespace::name``)."""

    def register(formula: Formula) -> Formula:
        for op_type in op_types:
            if op_type in _BY_OP:
                raise ValueError(f"op work of '{op_type}' is already registered")
            _BY_OP[op_type] = formula
        return formula

    return register


def op_work(info: "OpInfo", work: Work) -> OpWork:
    """The documented work of one call of ``info``'s op: its own formula, else its cost rule's family
    formula; a ``LookupError`` when neither exists (a rule whose formula is only a proxy)."""
    formula = _BY_OP.get(info.op_type) or _BY_RULE.get(info.cost)
    if formula is None:
        raise LookupError(f"no documented work formula for '{info.op_type}' (cost rule '{info.cost}')")
    return formula(work)


def has_work_formula(info: "OpInfo") -> bool:
    """Whether :func:`op_work` knows ``info``'s op (its own formula or its rule's family formula)."""
    return info.op_type in _BY_OP or info.cost in _BY_RULE


def floor_us(done: OpWork, dtype: str, profile: "HardwareProfile") -> float:
    """The roofline floor of ``done`` in ``dtype`` on ``profile``: the slowest of its resources at peak."""
    return max(
        done.cube_flops / (rules.peak_tflops("cube", dtype, profile) * 1e6),
        done.vector_flops / (rules.peak_tflops("vector", dtype, profile) * 1e6),
        done.hbm_bytes / (profile.hbm_gbps * 1e3),
        done.link_bytes * _link_share(profile) / (profile.comm_gbps * 1e3),
    )


def _link_share(profile: "HardwareProfile") -> float:
    """The share of a die's message that leaves it in a collective over ``ranks`` dies: (n-1)/n."""
    ranks = max(1, profile.comm_ranks)
    return (ranks - 1) / ranks


# ---------------------------------------------------------------- family formulas (rule formulas that are the semantics)


def _elements(work: Work) -> float:
    return float(sum(math.prod(spec.shape) for spec in work.outputs))


def _unpadded_matmul(work: Work) -> float:
    """``2 x M x N x K`` per batch on the shapes as written (the Cube's fractal padding is a mechanism)."""
    batch, m, n, k = rules.matmul_dims(work.inputs, work.outputs)
    return 2.0 * batch * m * n * k


def _matmul(work: Work) -> OpWork:
    return OpWork(cube_flops=_unpadded_matmul(work), hbm_bytes=rules.io_bytes(work))


def _grouped_matmul(work: Work) -> OpWork:
    """Each row multiplies by its expert only (the K-split form's E outputs share one K); the weights of
    the experts the rows hit are read (the rule's expected count under uniform routing)."""
    batch, m, n, k = rules.grouped_matmul_dims(work)
    return OpWork(cube_flops=2.0 * batch * m * n * k, hbm_bytes=rules.grouped_matmul_bytes(work))


def _vector(flops: Callable[[Work], float], nbytes: Callable[[Work], int]) -> Formula:
    def formula(work: Work) -> OpWork:
        return OpWork(vector_flops=flops(work), hbm_bytes=nbytes(work))

    return formula


def _link(nbytes: Callable[[Work], int]) -> Formula:
    def formula(work: Work) -> OpWork:
        return OpWork(link_bytes=nbytes(work))

    return formula


def _matmul_all_reduce(work: Work) -> OpWork:
    message = sum(spec.nbytes for spec in work.outputs)
    return _matmul(work)._replace(link_bytes=2 * message)


def _matmul_reduce_scatter(work: Work) -> OpWork:
    """The whole ``[M, K] x [K, N]`` product on the Cube, and its bytes over the link (one ring pass)."""
    m, k = work.inputs[0].shape[-2:]
    n = work.outputs[0].shape[-1]
    return OpWork(cube_flops=2.0 * m * n * k, hbm_bytes=rules.io_bytes(work),
                  link_bytes=rules.reduce_scatter_product_bytes(work.inputs, work.outputs))


def _matmul_all_gather(work: Work) -> OpWork:
    """The gathered ``[ranks x M, K] x [K, N]`` product on the Cube, and the gathered operand over the link."""
    return _matmul(work)._replace(link_bytes=rules.all_gather_input_bytes(work.inputs, work.outputs))


def _no_work(work: Work) -> OpWork:
    return OpWork()


def _attention(flops: Callable[[Work], float], nbytes: Callable[[Work], int] = rules.io_bytes) -> Formula:
    """Q K^T and P V on the Cube over the scores the call computes (the online softmax's few operations a
    score on the Vector units are left out: they run beside the Cube), every operand read once (of a paged
    cache, the rows the lengths reach)."""

    def formula(work: Work) -> OpWork:
        return OpWork(cube_flops=flops(work), hbm_bytes=nbytes(work))

    return formula


_BY_RULE.update({
    "matmul": _matmul, "matmul_tiles": _matmul, "matmul_tiles_preload": _matmul, "matmul_tiles_preload_nz": _matmul,
    "matmul_split_k": _matmul, "matmul_slice_k": _matmul, "linear": _matmul,
    "grouped_matmul": _grouped_matmul,
    "elementwise": _vector(rules.elementwise_flops, rules.io_bytes),
    "aicpu": _vector(rules.elementwise_flops, rules.io_bytes),
    "reduction": _vector(rules.reduction_flops, rules.io_bytes),
    "copy": _vector(rules.no_flops, rules.io_bytes),
    "fill": _vector(rules.no_flops, rules.output_bytes),
    "gather_rows": _vector(rules.no_flops, rules.gather_rows_bytes),
    # One memory transaction per element addressed on its own: HBM moves no less per access.
    "gather_elements": _vector(rules.no_flops, rules.gather_elements_bytes),
    "scatter": _vector(rules.elementwise_flops, rules.scatter_bytes),
    "index_put": _vector(rules.elementwise_flops, rules.index_put_bytes),
    "cache_update": _vector(rules.no_flops, rules.cache_update_bytes),
    "prefetch": _vector(rules.no_flops, rules.prefetch_bytes),
    "host": _no_work,
    "all_reduce": _link(rules.all_reduce_bytes),
    "collective": _link(rules.collective_bytes),
    "mc2_dispatch": _link(rules.dispatch_bytes),
    "mc2_combine": _link(rules.combine_bytes),
    "matmul_all_reduce": _matmul_all_reduce,
    "matmul_reduce_scatter": _matmul_reduce_scatter,
    "matmul_all_gather": _matmul_all_gather,
})


# ---------------------------------------------------------------- attention, op by op (each op's layout, lengths and modes)

register_op_work(
    "npu::npu_fused_infer_attention_score", "npu::npu_fused_infer_attention_score_v2", "npu::npu_prompt_flash_attention",
    "npu::npu_fusion_attention",
)(_attention(attention.fused_attention_flops, attention.fused_attention_bytes))
register_op_work("npu::npu_incre_flash_attention")(
    _attention(attention.incre_attention_flops, attention.incre_attention_bytes)
)
register_op_work("npu::npu_fusion_attention_grad")(_attention(attention.fused_attention_grad_flops))
register_op_work("aten::_scaled_dot_product_flash_attention_for_cpu")(_attention(attention.sdpa_flops))
register_op_work("npu::_npu_flash_attention", "npu::_npu_flash_attention_unpad", "npu::_npu_flash_attention_unpad_v2")(
    _attention(attention.packed_attention_flops)
)
register_op_work("npu::_npu_flash_attention_v3")(_attention(attention.packed_causal_attention_flops))
register_op_work("npu::_npu_flash_attention_qlens", "npu::_npu_paged_attention", "npu::_npu_paged_attention_splitfuse")(
    lambda work: OpWork(cube_flops=attention.paged_attention_flops(work), hbm_bytes=attention.paged_attention_bytes(work))
)
register_op_work("npu::npu_lightning_indexer", "npu::npu_quant_lightning_indexer")(
    _attention(attention.dense_indexer_flops)
)
register_op_work("npu::npu_sparse_flash_attention", "npu::npu_kv_quant_sparse_flash_attention")(
    lambda work: OpWork(
        cube_flops=attention.sparse_attention_flops(work), hbm_bytes=attention.sparse_attention_bytes(work)
    )
)
