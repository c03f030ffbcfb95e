"""Eager-loop rows: the time per call of one torch call made many times in a row, as a benchmark script
times it with two device events around the loop (``start.record(); for _ in range(n): fn(); end.record()``,
``elapsed_time / n``).

That time is not a kernel's own duration: the host runs torch_npu's eager path for every call (dispatch,
shape inference, tiling, launch) while the device runs the kernels, so a small call is host-bound and a
large one device-bound. The builder writes the call ``iterations`` times on one stream (each call on the
same inputs, as the loop does) and simulates it eager; the row's number is the simulated time over the
calls. Attention flops follow the op's documented semantics: two products of the query with every key
(Q K^T and P V) per query head, non-causal unless the row says otherwise, four flops per query-key pair
and head dimension.
"""

from __future__ import annotations

from typing import Callable

from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate

from . import kernels, models
from .rows import Profiles, Row


def attention_flops(row: Row) -> float:
    """Q K^T and P V of every query head against every key of its sequence (half of them when causal)."""
    attrs = row.get("attrs")
    pairs = attrs["batch"] * attrs["q_heads"] * attrs["q_len"] * attrs["kv_len"]
    share = 0.5 if attrs.get("causal", False) else 1.0
    return 4.0 * pairs * attrs["head_dim"] * share


def _inputs(row: Row, builder: ProgramBuilder) -> list[str]:
    return [builder.input(name, tensor["shape"], tensor["dtype"]) for name, tensor in zip("qkv", row.get("inputs"))]


def _fused_attention(op: str) -> Callable[[Row, ProgramBuilder, list[str]], None]:
    """One call of a fused attention kernel (``op``) on the row's q, k and v; its output has the query's shape."""

    def call(row: Row, builder: ProgramBuilder, inputs: list[str]) -> None:
        query = row.get("inputs")[0]
        builder.op(op, inputs, query["shape"], query["dtype"], flops=attention_flops(row))

    return call


def _gemm_attention(row: Row, builder: ProgramBuilder, inputs: list[str]) -> None:
    """``softmax(q @ k.T * scale) @ v`` written with torch ops on 2-D q [Sq, D], k and v [Sk, D]: a MatMul,
    a Muls, a SoftmaxV2 and a MatMul into the preallocated output."""
    q, k, v = inputs
    (sq, d), (sk, _) = (tensor["shape"] for tensor in row.get("inputs")[:2])
    dtype = row.get("inputs")[0]["dtype"]
    scores = builder.op("aten::mm", [q, k], (sq, sk), dtype, flops=2.0 * sq * sk * d)
    scaled = builder.op("aten::mul", [scores], (sq, sk), dtype)
    probs = builder.op("aten::_softmax", [scaled], (sq, sk), dtype)
    builder.op("aten::mm", [probs, v], (sq, d), dtype, flops=2.0 * sq * sk * d)


_CALLS: dict[str, Callable[[Row, ProgramBuilder, list[str]], None]] = {
    "npu_fused_infer_attention_score": _fused_attention("npu::npu_fused_infer_attention_score"),
    "npu_fusion_attention": _fused_attention("npu::npu_fusion_attention"),
    "gemm_attention": _gemm_attention,
}


def _loop(row: Row, builder: ProgramBuilder) -> None:
    """The row's call written ``iterations`` times on the same inputs."""
    call = _CALLS[row.get("call_kind")]
    inputs = _inputs(row, builder)
    for _ in range(row.get("iterations")):
        call(row, builder, inputs)


def call_us(row: Row, profiles: Profiles) -> float:
    """The modeled time per call of an eager loop (``metric = "eager_call"``)."""
    if row.get("call_kind") not in _CALLS:
        raise NotImplementedError(f"no eager-loop builder for {row.get('call_kind')!r}")
    program = kernels.program(row, _loop, models.catalog())
    profile = profiles.for_row(row)
    plan = models.plan_of((row.id, "eager"), program, profile, variant=Variant.BASELINE, mode="eager")
    report = simulate(program, plan, profile, host=HostConfig(threads=1))
    return report.time_us / row.get("iterations")
