"""Kernel and collective rows: one kernel (or the few kernels of one torch call) built from the row's op,
inputs and attrs, timed as msprof's TaskDuration (the kernels' own time, no dispatch gaps).

Library kernels (CATLASS, PyPTO, TileLang) are catalog entries of their own here, each naming the cost
rule of the tiling it uses: CATLASS's basic kernels tile the output only (``matmul_tiles``), its split-K
examples split K over the cores (``matmul_split_k``); the catalog's ``matmul`` rule is CANN's own choice
between them. A preloading example whose B is stored in the Cube's NZ layout (``B zN``) reads it without
the ND2NZ conversion (``matmul_tiles_preload_nz``). A row that names its tile shape (``attrs.tiles``) runs with that tile.

A PyPTO kernel runs as subgraph tasks that PyPTO's AI CPU scheduler hands out (``cost/mpmd.py``): its
catalog entry carries the task count its row's source states through loops and tile shapes (the KDA
recurrence: a task per sequence, head, token and subgraph of the token loop's body; a PyPTO matmul: a task
per ``l1_reuse`` output tiles of its L1 tile).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import fields
from typing import Any, Callable

from pytest_npufuse import cost
from pytest_npufuse.ir.program import Program
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.ir.op import OpInfo
from pytest_npufuse.target.catalog import OpCatalog, load_catalog
from pytest_npufuse.target.profile import HardwareProfile

from . import models
from .rows import Profiles, Row


def _rule(name: str, fallback: str) -> str:
    """A cost rule by name, or ``fallback`` in a model that lacks it (the before table)."""
    return name if name in cost.rule_names() else fallback


def _entry(engine: str, rule: str, kernel_type: str, **keys: Any) -> dict[str, Any]:
    return {
        "engine": engine,
        "fusable": False,
        "sync_all": False,
        "block_dim": "auto",
        "cost": rule,
        "kernel_type": kernel_type,
        **keys,
    }


@functools.cache
def library_catalog():
    """Catalog entries of the library kernels the kernel rows measure."""
    tiles, split_k = _rule("matmul_tiles", "matmul"), _rule("matmul_split_k", "matmul")
    return load_catalog(
        {
            "catlass::matmul": _entry("cube", tiles, "Matmul"),
            "catlass::matmul_preload": _entry("cube", _rule("matmul_tiles_preload", tiles), "Matmul"),
            "catlass::matmul_preload_nz": _entry(
                "cube", _rule("matmul_tiles_preload_nz", _rule("matmul_tiles_preload", tiles)), "Matmul"
            ),
            "catlass::matmul_slice_k": _entry("cube", _rule("matmul_slice_k", tiles), "SingleCoreSplitkMatmul"),
            "catlass::quant_matmul": _entry("cube", tiles, "QuantMatmul"),
            "catlass::quant_matmul_split_k": _entry("cube", split_k, "QuantMultiCoreSplitkMatmul"),
            "bench::empty_kernel": {**_entry("vector", "fill", "EmptyKernel"), "block_dim": 4096},
            "cann::sparse_flash_attention": _sparse_entry(),
        },
        "benchmarks/fidelity/kernels.py",
    )


def _pypto_entry(op: str) -> dict[str, Any]:
    """The catalog entry of a PyPTO kernel's work (the MPMD scheduling comes on top)."""
    if op == "pypto::matmul":
        return _entry("cube", _rule("matmul_tiles", "matmul"), "Matmul")
    return _entry("vector", "elementwise", "FusedRecurrentKda", flops_per_element=6)


@functools.cache
def pypto_catalog(op: str, tasks: int) -> OpCatalog:
    """A catalog of the one PyPTO kernel ``op`` running ``tasks`` subgraph tasks; a model without the MPMD
    scheduler (the before table) prices its work alone."""
    scheduled = {"mpmd_tasks": tasks} if "mpmd_tasks" in {item.name for item in fields(OpInfo)} else {}
    return load_catalog({op: {**_pypto_entry(op), **scheduled}}, "benchmarks/fidelity/kernels.py")


# Vector operations per attention score in an online softmax (max, subtract, exp, sum, cast to the Cube's
# dtype): an estimate, the kernels publish no count.
_SOFTMAX_OPS = 5


def _sparse_entry() -> dict[str, Any]:
    """SparseFlashAttention: the sparse_attention rule (gathered rows, one core per batch, query token and
    KV head); a model without it prices it as a decode attention on one core."""
    if "sparse_attention" in cost.rule_names():
        return _entry("cube", "sparse_attention", "SparseFlashAttention", flops_per_element=_SOFTMAX_OPS)
    return {**_entry("cube", "attention", "SparseFlashAttention"), "block_dim": 1}


def task_duration_us(row: Row, program, profile: HardwareProfile) -> float:
    """The summed kernel time of the row's program run once, op by op (op_statistic's Total Time)."""
    plan = models.plan_of(row.id, program, profile, variant=Variant.BASELINE)
    report = simulate(program, plan, profile)
    return sum(k.duration_us for k in report.kernels if k.parent is None)


_PROGRAMS: dict[str, Program] = {}


def program(row: Row, build: Callable[[Row, ProgramBuilder], None], catalog: OpCatalog | None = None) -> Program:
    """The row's program, built once: it depends on the row alone, not on the profile a fit tries."""
    program = _PROGRAMS.get(row.id)
    if program is None:
        builder = ProgramBuilder(catalog or models.catalog())
        build(row, builder)
        program = _PROGRAMS[row.id] = builder.build()
    return program


# The tile order each CATLASS example hands its tiles out in (its BlockScheduler, hicann/catlass
# examples @0dfcf9df): offset and direction ("auto": Zn when M > N, else Nz). 44 holds A whole in L1
# and walks N one tile row at a time when M exceeds one tile (GemmIdentityBlockSwizzleL1FullLoad<1, 0>).
_EXAMPLE_SWIZZLE = {
    "00_basic_matmul": (3, "zn"),
    "21_basic_matmul_preload_zN": (3, "zn"),
    "06_optimized_matmul": (3, "auto"),
    "12_quant_matmul": (3, "auto"),
    "52_quant_multi_core_splitk_matmul_tla": (3, "zn"),
    "34_single_core_splitk_matmul": (20, "auto"),
}
# The CATLASS examples whose block MMAD preloads (DispatchPolicy MmadAtlasA2Preload<unitFlag, shuffleK>:
# 06_optimized_matmul/optimized_matmul.cpp, 21_basic_matmul_preload_zN/basic_matmul_preload_zN.cpp,
# hicann/catlass @0710e71d); 00_basic_matmul uses MmadAtlasA2Pingpong, double-buffered within a tile.
_PRELOAD_EXAMPLES = ("06_optimized_matmul", "21_basic_matmul_preload_zN")
# The quant examples' L1 tile (12, 44, 52: GemmShape<128, 256, 512>): 512 int8 elements of K per load.
_QUANT_K_BLOCK = 512


def _example(row: Row) -> str:
    """The CATLASS example a row ran ("" for another kernel), also for a variant of one."""
    example = re.search(r"CATLASS (\w+)", row.get("op"))
    return example.group(1) if example else ""


def _swizzle(row: Row) -> tuple[int, str]:
    """The row's tile order: the one its ``tiles`` names (``swizzle <4,1>``), else its example's."""
    named = re.search(r"swizzle <(\d+),\s*(\d)>", row.get("attrs", {}).get("tiles", ""))
    if named:
        return int(named.group(1)), ("zn", "nz")[int(named.group(2))]
    name = _example(row)
    if name.startswith("44_"):
        return (1, "zn") if row.get("attrs")["m"] > 128 else (3, "zn")
    return _EXAMPLE_SWIZZLE.get(name, (3, "auto"))


def _tile_changes(row: Row) -> dict[str, Any]:
    """The tile a CATLASS row's kernel uses: the one a tuning-guide row names (``L1 128x256x256``),
    the quant examples' K depth, and the example's tile order."""
    if "CATLASS" not in row.get("op"):
        return {}
    offset, direction = _swizzle(row)
    changes: dict[str, Any] = {"cube_swizzle_offset": offset, "cube_swizzle_direction": direction}
    if row.get("inputs")[0]["dtype"] == "int8":
        changes["cube_k_block"] = _QUANT_K_BLOCK
    match = re.search(r"L1 (\d+)x(\d+)x(\d+)", row.get("attrs", {}).get("tiles", ""))
    if match:
        m, n, k = map(int, match.groups())
        changes.update(cube_tile_m=m, cube_tile_n=n, cube_k_block=k)
    return changes


def _matmul(row: Row, builder: ProgramBuilder) -> None:
    attrs, op = row.get("attrs"), row.get("op")
    m, n, k = attrs["m"], attrs["n"], attrs["k"]
    dtype = row.get("inputs")[0]["dtype"]
    a, b = builder.input("a", (m, k), dtype), builder.input("b", (k, n), dtype)
    out_dtype = attrs.get("out_dtype", dtype)
    if dtype == "int8":
        scales = [builder.input("scale", (n,), "float32"), builder.input("token_scale", (m,), "float32")]
        kind = "catlass::quant_matmul_split_k" if "Splitk" in op else "catlass::quant_matmul"
        builder.op(kind, [a, b, *scales], (m, n), out_dtype)
    else:
        kind = "catlass::matmul_slice_k" if "SingleCoreSplitk" in op else "catlass::matmul"
        kind = "catlass::matmul_preload" if _example(row) in _PRELOAD_EXAMPLES else kind
        if kind == "catlass::matmul_preload" and "B zN" in attrs.get("layout", ""):
            kind = "catlass::matmul_preload_nz"  # the weight already in the Cube's NZ layout
        builder.op(kind, [a, b], (m, n), out_dtype)


def _empty(row: Row, builder: ProgramBuilder) -> None:
    builder.op("bench::empty_kernel", [], (1,), "float16")


def _kda_tasks(row: Row) -> int:
    """The KDA recurrence's tasks: every (sequence, head) pair is a parallel unit (the guide's LOOP_NH), and
    each of its tokens runs the token loop's body as ``loop_t_subgraphs`` subgraphs (4 compiled, 1 once
    merged by sg_set_scope)."""
    attrs = row.get("attrs")
    tokens = row.get("inputs")[0]["shape"][1]
    return attrs["sequences"] * attrs["heads"] * tokens * attrs["loop_t_subgraphs"]


def _l1_tile(row: Row) -> tuple[int, int, int]:
    """The (M, N, K) L1 tile a row names as ``L1 MxNxK``."""
    m, n, k = re.search(r"L1 (\d+)x(\d+)x(\d+)", row.get("attrs")["tiles"]).groups()
    return int(m), int(n), int(k)


def _pypto_matmul_tasks(row: Row) -> int:
    """A PyPTO matmul's tasks: a subgraph per L1 output tile, ``l1_reuse`` subgraphs that share an operand
    merged into one task (L1Reuse)."""
    attrs = row.get("attrs")
    tile_m, tile_n, _ = _l1_tile(row)
    tiles = math.ceil(attrs["m"] / tile_m) * math.ceil(attrs["n"] / tile_n)
    return math.ceil(tiles / attrs["l1_reuse"])


def _pypto_matmul(row: Row, builder: ProgramBuilder) -> None:
    """A PyPTO matmul on the operands it multiplies (``m x k`` by ``k x n``, after any in-place reshape)."""
    attrs = row.get("attrs")
    dtype = row.get("inputs")[0]["dtype"]
    a = builder.input("a", (attrs["m"], attrs["k"]), dtype)
    b = builder.input("b", (attrs["k"], attrs["n"]), dtype)
    builder.op("pypto::matmul", [a, b], (attrs["m"], attrs["n"]), attrs.get("out_dtype", dtype))


def _recurrent_kda(row: Row, builder: ProgramBuilder) -> None:
    """One decode step of the KDA recurrence: the fp32 state [seq, heads, d, d] is read, decayed, updated
    by k v^T and read out by q, then written back."""
    q, k, v, state = (
        builder.input(name, tensor["shape"], tensor["dtype"]) for name, tensor in zip("qkvs", row.get("inputs"))
    )
    builder.op("pypto::fused_recurrent_kda", [q, k, v, state], row.get("inputs")[3]["shape"], "float32")


def _sparse_attention(row: Row, builder: ProgramBuilder) -> None:
    """Sparse MLA decode attention on the row's own inputs (query and its rope part, the latent and rope
    caches, the top-k index): the selected ``sparse_size`` cached rows are gathered and attended by every
    query head (the ``sparse_attention`` rule)."""
    attrs = row.get("attrs")
    names = ("q", "q_rope", "k", "k_rope", "indices")
    inputs = [builder.input(name, tensor["shape"], tensor["dtype"]) for name, tensor in zip(names, row.get("inputs"))]
    heads, topk, d, rope = attrs["q_heads"], attrs["sparse_size"], attrs["d"], attrs["d_rope"]
    flops = 2.0 * attrs["batch"] * attrs["q_tokens"] * heads * topk * (d + rope + d)
    out = (attrs["batch"], attrs["q_tokens"], heads, d)
    builder.op("cann::sparse_flash_attention", inputs, out, row.get("inputs")[0]["dtype"], flops=flops)


def _one_hot_sum(row: Row, builder: ProgramBuilder) -> None:
    """The router mask of docs/feature-docs.md#affinity-ops as one_hot(indices, E).sum(1): an int64 one-hot, so Cast and
    ReduceSum run on AI CPU."""
    tokens, top_k, experts = (row.get("attrs")[key] for key in ("tokens", "top_k", "experts"))
    idx = builder.input("idx", (tokens, top_k), "int64")
    arange = builder.op("aten::arange", [], (experts,), "int64")
    eq = builder.op("aten::eq", [idx, arange], (tokens, top_k, experts), "bool")
    cast = builder.op("aten::_to_copy", [eq], (tokens, top_k, experts), "int64")
    builder.op("aten::sum", [cast], (tokens, experts), "int64")


def _zeros_scatter(row: Row, builder: ProgramBuilder) -> None:
    tokens, top_k, experts = (row.get("attrs")[key] for key in ("tokens", "top_k", "experts"))
    idx = builder.input("idx", (tokens, top_k), "int64")
    zeros = builder.op("aten::zeros", [], (tokens, experts))
    builder.op("aten::scatter", [zeros, idx], (tokens, experts))


_KERNELS = (
    (re.compile(r"^pypto\.matmul"), _pypto_matmul),
    (re.compile(r"Matmul"), _matmul),
    (re.compile(r"^empty kernel"), _empty),
    (re.compile(r"^fused_recurrent_kda"), _recurrent_kda),
    (re.compile(r"^SparseFlashAttention"), _sparse_attention),
    (re.compile(r"^OneHot"), _one_hot_sum),
    (re.compile(r"^ZerosLike"), _zeros_scatter),
)


# PyPTO kernels: the catalog op each builds and how its row's source sets its task count.
_PYPTO = {
    _pypto_matmul: ("pypto::matmul", _pypto_matmul_tasks),
    _recurrent_kda: ("pypto::fused_recurrent_kda", _kda_tasks),
}


def _catalog(row: Row, build: Callable[[Row, ProgramBuilder], None]) -> OpCatalog:
    """The library catalog, or for a PyPTO kernel one whose entry runs the row's task count."""
    if build not in _PYPTO:
        return library_catalog()
    op, tasks = _PYPTO[build]
    return pypto_catalog(op, tasks(row))


def _pypto_tile(row: Row, build: Callable[[Row, ProgramBuilder], None]) -> dict[str, Any]:
    """The Cube tile a PyPTO matmul row names."""
    if build is not _pypto_matmul:
        return {}
    m, n, k = _l1_tile(row)
    return {"cube_tile_m": m, "cube_tile_n": n, "cube_k_block": k}


def kernel_us(row: Row, profiles: Profiles) -> float:
    """The modeled TaskDuration of a kernel row."""
    build = next((build for pattern, build in _KERNELS if pattern.search(row.get("op"))), None)
    if build is None:
        raise NotImplementedError(f"no builder for kernel op {row.get('op')!r}")
    built = program(row, build, _catalog(row, build))
    return task_duration_us(row, built, profiles.for_row(row, **_tile_changes(row), **_pypto_tile(row, build)))


def _exchange(row: Row, builder: ProgramBuilder) -> None:
    """DeepEP-Ascend low-latency dispatch (int8 tokens out) or combine (bf16 expert outputs back) of
    ``tokens`` per rank, ``top_k`` copies each."""
    attrs = row.get("attrs")
    tokens, hidden, top_k = row.get("tokens"), attrs["hidden"], attrs["top_k"]
    topk = builder.input("topk", (tokens, top_k), "int32")
    if "Dispatch" in row.get("op"):
        x = builder.input("x", (tokens, hidden), "int8")
        builder.op("npu::npu_moe_distribute_dispatch", [x, topk], (tokens * top_k, hidden), "int8")
    else:
        y = builder.input("y", (tokens * top_k, hidden), attrs["dtype"])
        builder.op("npu::npu_moe_distribute_combine", [y, topk], (tokens, hidden), attrs["dtype"])


def collective_us(row: Row, profiles: Profiles) -> float:
    """A dispatch or combine of ``tokens`` per rank over ``ranks`` dies (:func:`_exchange`)."""
    return task_duration_us(row, program(row, _exchange), profiles.for_row(row, comm_ranks=row.get("ranks")))
