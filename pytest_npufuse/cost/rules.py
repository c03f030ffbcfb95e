"""The built-in cost rules, each a named mechanism with the profile constants it reads.

Mechanisms (profile keys in brackets, each cited or marked ``estimate`` in ``data/<target>.toml``):

- **roofline**: an AI Core body is as slow as the slower of its arithmetic (peak for its dtype x
  ``[efficiency] compute``, scaled by the share of cores it runs on) and its memory traffic (bytes at
  HBM bandwidth, or at the per-core path ``core_ddr_bytes_per_cycle`` when few cores launch).
- **decode tiling** (``matmul``): a matmul whose 128x256 output tiles cannot fill the Cube cores splits
  N down to ``decode_tile_n`` columns and then K down to ``decode_tile_k``, as CANN's decode tilings do,
  so a skinny decode matmul streams its weights over every core at HBM speed. The Cube works on
  ``cube_fractal``-sized fractals, so an output of ``[b, 1, 1]`` costs a full fractal per batch (seed
  003's BatchMatMul degradation).
- **bytes touched**: a tensor passed twice is read once; an in-place cache update (``cache_update``) writes
  its slots, not the cache; a grouped matmul reads only the experts its
  rows hit (expected distinct experts under uniform routing); a row gather reads the rows it returns,
  not the whole table; an element gather or scatter pays ``access_bytes`` per element it addresses (one
  memory transaction each: GatherElements vs GatherV2, docs/feature-docs.md#affinity-ops); IndexPutV2 with a boolean
  mask first expands the mask into int64 indices (NonZero) and then addresses every selected element; an
  input a prefetch put in L2 costs no HBM traffic.
- **forms** (docs/feature-docs.md#affinity-ops): the same aten op priced by the torch call it came from (catalog entries
  ``"op@form"``): ``nn.Linear`` pays a TransData of its input to FRACTAL_NZ where op-plugin casts it
  (``linear``); ``repeat_interleave`` with a scalar runs RepeatInterleave's per-element branch
  (``gather_elements`` with ``access_bytes``) where unsqueeze/expand/reshape is a plain copy.
- **collectives** (``[comm]``): ring algorithms over ``ranks`` dies, ``(n-1)/n`` of the message per
  pass (two passes for AllReduce) at ``link_gbps x efficiency``, plus ``latency_us`` per step; a ring
  over more than ``node_ranks`` dies runs at the slower ``scaleout_gbps`` (RoCE between A2 servers).
- **MC2** matmul + all-reduce: the longer of the matmul's roofline and the ring AllReduce of its output
  (the two are pipelined inside the op); matmul + reduce-scatter the same with a one-pass ring
  ReduceScatter of the whole product, of which each die keeps its ``1/ranks`` rows.
- **MC2** dispatch/combine: AI Vector kernels that talk over the link: ``mc2_phase_us`` per handshake
  phase (dispatch has two), ``mc2_rank_us`` per peer a phase waits on, plus the message: to peers on
  the node at link speed, to the others over the scale-out link at the same time.
- **AI CPU**: scalar cores at ``[aicpu]`` rates.
- **L2 prefetch**: an SDMA task that streams its bytes from HBM at HBM speed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence

from .cube import (
    Gemm, Tiling, cann_tiling, cast_epilogue_us, cube_us, output_tiles, single_core_split_k, split_k, tile_count,
)
from .registry import Work, register_cost_rule

if TYPE_CHECKING:
    from ..ir.program import Kernel, TensorSpec
    from ..target.profile import HardwareProfile


def _elements(spec: "TensorSpec") -> int:
    return math.prod(spec.shape)


def _ceil(value: float, step: int) -> int:
    return -(-int(value) // step) * step


# ---------------------------------------------------------------- flops


def matmul_dims(inputs: Sequence["TensorSpec"], outputs: Sequence["TensorSpec"]) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of a matmul-like kernel from its output and the input that is its left
    operand: an input ``[..., M, K]`` for which another input is ``[..., K, N]`` (a bias has no such
    partner); else a transposed left operand ``[..., K, M]`` with a partner ``[..., K, N]`` (ATB's
    ``transposeA``, e.g. ``_npu_matmul_add_fp32``); else the first matrix input's last dim is K."""
    out = outputs[0].shape if outputs else (1,)
    n = out[-1] if out else 1
    m = out[-2] if len(out) > 1 else 1
    batch = math.prod(out[:-2]) if len(out) > 2 else 1
    matrices = [spec.shape for spec in inputs if len(spec.shape) >= 2]
    for lhs in matrices:
        k = lhs[-1]
        if lhs[-2] == m and any(rhs is not lhs and rhs[-2] == k and rhs[-1] == n for rhs in matrices):
            return batch, m, n, k
    for lhs in matrices:
        k = lhs[-2]
        if lhs[-1] == m and any(rhs is not lhs and rhs[-2] == k and rhs[-1] == n for rhs in matrices):
            return batch, m, n, k
    return batch, m, n, (matrices[0][-1] if matrices else 1)


def matmul_flops(work: Work) -> float:
    """2 x M x N x K per batch, on the shapes the Cube really multiplies: M, N and K padded to its
    16x16x16 fractal (``cube_fractal`` is a profile fact; the capture-time count uses the A2/A3 value
    16, docs/sources.md#hw-1-1), so tiny outputs cost whole fractals."""
    batch, m, n, k = matmul_dims(work.inputs, work.outputs)
    return 2.0 * batch * _ceil(m, 16) * _ceil(n, 16) * _ceil(k, 16)


def matmul_reduce_scatter_flops(work: Work) -> float:
    """MatmulReduceScatter multiplies its whole ``[M, K]`` input by ``[K, N]`` though it returns only its
    die's ``M / ranks`` rows: 2 x M x N x K from the left operand and the output's N, padded as
    :func:`matmul_flops` pads."""
    m, k = work.inputs[0].shape[-2:] if work.inputs and len(work.inputs[0].shape) >= 2 else (1, 1)
    n = work.outputs[0].shape[-1] if work.outputs and work.outputs[0].shape else 1
    return 2.0 * _ceil(m, 16) * _ceil(n, 16) * _ceil(k, 16)


def grouped_matmul_dims(work: Work) -> tuple[int, int, int, int]:
    """A grouped matmul's :func:`matmul_dims`, except in the K-split form (npu_grouped_matmul's
    ``group_type=2``, the weight gradients ``[M, K] x [K, N] -> [E, M, N]``): there the E outputs share
    one K, each summing only its group's slice, so together they are one ``M x N x K`` product, not E."""
    batch, m, n, k = matmul_dims(work.inputs, work.outputs)
    out = work.outputs[0].shape if work.outputs else ()
    if len(out) == 3 and all(len(spec.shape) <= 2 for spec in work.inputs):
        batch = 1
    return batch, m, n, k


def grouped_matmul_flops(work: Work) -> float:
    """:func:`matmul_flops` over :func:`grouped_matmul_dims`."""
    batch, m, n, k = grouped_matmul_dims(work)
    return 2.0 * batch * _ceil(m, 16) * _ceil(n, 16) * _ceil(k, 16)


def attention_flops(work: Work) -> float:
    """Decode attention's arithmetic is dwarfed by reading K/V; counted as 2 x output x head dim."""
    out = sum(_elements(spec) for spec in work.outputs)
    head_dim = work.inputs[0].shape[-1] if work.inputs and work.inputs[0].shape else 1
    return 2.0 * out * head_dim


def elementwise_flops(work: Work) -> float:
    return sum(_elements(spec) for spec in work.outputs) * work.per_element


def reduction_flops(work: Work) -> float:
    return float(sum(_elements(spec) for spec in work.inputs[:1]))


def no_flops(work: Work) -> float:
    return 0.0


# ---------------------------------------------------------------- bytes


def _read(work: Work, skip: int | None = None) -> int:
    """Bytes of the distinct inputs read from HBM (not L2-resident), except input ``skip``."""
    return sum(
        spec.nbytes
        for position, (spec, first, resident) in enumerate(zip(work.inputs, work.first_use, work.resident))
        if first and not resident and position != skip
    )


def _written(work: Work) -> int:
    return sum(spec.nbytes for spec in work.outputs)


def io_bytes(work: Work) -> int:
    """Every distinct input once and every output."""
    return _read(work) + _written(work)


def output_bytes(work: Work) -> int:
    """A fill writes only."""
    return _written(work)


def no_bytes(work: Work) -> int:
    return 0


def _largest(work: Work) -> int:
    return max(range(len(work.inputs)), key=lambda i: work.inputs[i].nbytes, default=-1)


def grouped_matmul_bytes(work: Work) -> int:
    """Activations, scales and output in full, but of the ``[E, K, N]`` expert weights only the
    experts the M rows hit: E x (1 - (1 - 1/E)^M) expected under uniform routing (an estimate; a
    skewed router hits fewer)."""
    weight = _largest(work)
    if weight < 0 or len(work.inputs[weight].shape) < 3 or not work.first_use[weight] or work.resident[weight]:
        return io_bytes(work)
    experts = work.inputs[weight].shape[0]
    rows = work.outputs[0].shape[0] if work.outputs and work.outputs[0].shape else 1
    hit = experts * (1.0 - (1.0 - 1.0 / experts) ** rows)
    return _read(work, skip=weight) + int(work.inputs[weight].nbytes * hit / experts) + _written(work)


def gather_rows_bytes(work: Work) -> int:
    """A row gather (GatherV2: embedding, index_select) reads the rows it returns and its indices,
    not the whole table."""
    return _read(work, skip=_largest(work)) + 2 * _written(work)


def gather_elements_bytes(work: Work) -> int:
    """An element gather (GatherElements) addresses each output element on its own: one memory
    transaction of ``access_bytes`` per element, plus its indices and output."""
    elements = sum(_elements(spec) for spec in work.outputs)
    return _read(work, skip=_largest(work)) + _written(work) + elements * work.access_bytes


def scatter_bytes(work: Work) -> int:
    """A scatter (ScatterElements, IndexPut) copies its input and then addresses each index on its
    own: one ``access_bytes`` transaction per index element."""
    indices = sum(_elements(spec) for spec in work.inputs if spec.dtype in ("int64", "int32"))
    return io_bytes(work) + indices * work.access_bytes


def _updates(work: Work, destination: int) -> int:
    """Bytes of the values an in-place update writes: every non-index input but the destination."""
    return sum(
        spec.nbytes for position, spec in enumerate(work.inputs)
        if position != destination and spec.dtype not in ("int32", "int64")
    )


def cache_update_bytes(work: Work) -> int:
    """An in-place scatter into a cache (ScatterNdUpdate or Scatter writing a KV cache) reads its indices
    and updates and writes the updated slots; the cache itself (its largest input) is neither read nor
    rewritten, whatever size the op's result is declared with."""
    destination = _largest(work)
    return _read(work, skip=destination) + _updates(work, destination)


def index_put_bytes(work: Work) -> int:
    """IndexPutV2 (``x[indices] = values``, and the backward of advanced indexing): as :func:`scatter_bytes`,
    and a boolean mask index is first turned into int64 indices by NonZero (op-plugin
    ``AdvanceIndex::npu_expand_tensors``: one index tensor per mask dim), priced at its upper bound, every
    element selected: the int64 indices written and read back, and one ``access_bytes`` transaction per
    selected element."""
    masks = [spec for spec in work.inputs if spec.dtype == "bool"]
    selected = sum(_elements(mask) for mask in masks)
    expanded = sum(_elements(mask) * len(mask.shape) * 8 for mask in masks)
    return scatter_bytes(work) + 2 * expanded + selected * work.access_bytes


def _message(work: Work) -> int:
    return max(sum(spec.nbytes for spec in work.inputs), _written(work))


def all_reduce_bytes(work: Work) -> int:
    """The bytes a ring AllReduce moves per die: reduce-scatter then all-gather of the message."""
    return 2 * _message(work)


def collective_bytes(work: Work) -> int:
    """AllGather, ReduceScatter, AlltoAll, Broadcast: one pass of the larger of input and output."""
    return _message(work)


def dispatch_bytes(work: Work) -> int:
    """MC2 dispatch sends every token to each of its experts: the expanded output."""
    return sum(spec.nbytes for spec in work.outputs[:1])


def combine_bytes(work: Work) -> int:
    """MC2 combine sends the expanded expert outputs back: its first input."""
    return sum(spec.nbytes for spec in work.inputs[:1])


# op-plugin's op_plugin::utils::is_nd_to_nz_on_fly: the Cube reads ND operands directly when both are
# small (at most 65535 elements) or the inner axis is in [128, 65535], or below 128 and a multiple of 16.
_ON_FLY_SMALL, _ON_FLY_MIN, _ON_FLY_MAX, _NZ_ROWS, _NZ_BYTES = 65535, 128, 65535, 16, 32


def _reads_nd(m: int, n: int, k: int) -> bool:
    if m * k <= _ON_FLY_SMALL and n * k <= _ON_FLY_SMALL:
        return True
    return _ON_FLY_MIN <= k <= _ON_FLY_MAX or (k < _ON_FLY_MIN and k % 16 == 0)


def linear_bytes(work: Work) -> int:
    """``nn.Linear`` / ``F.linear`` as torch_npu runs them (op-plugin ``LinearKernelNpu.cpp``,
    ``npu_linear``): MatMulV2 with the weight transposed, after a TransData that casts the input to
    FRACTAL_NZ unless the Cube can read it as ND (:func:`_reads_nd`, op-plugin's
    ``is_nd_to_nz_on_fly`` on input ``[M, K]`` and weight ``[N, K]``). ``torch.addmm(bias, x, w.t())``
    (``AddmmKernelNpu.cpp``) runs MatMul on the ND input with a transpose attribute and no cast. The
    cast reads the input and writes it in 16-row x 32-byte fractals; its own launch is not counted."""
    batch, m, n, k = matmul_dims(work.inputs, work.outputs)
    if _reads_nd(batch * m, n, k):
        return io_bytes(work)
    item = next((spec.nbytes // max(1, _elements(spec)) for spec in work.inputs if spec.shape[-1:] == (k,)), 2)
    padded = _ceil(batch * m, _NZ_ROWS) * _ceil(k * item, _NZ_BYTES)
    return io_bytes(work) + batch * m * k * item + padded


def prefetch_bytes(work: Work) -> int:
    """An L2 prefetch streams the tensor it is given (its first input) from HBM."""
    return sum(spec.nbytes for spec in work.inputs[:1])


# ---------------------------------------------------------------- block dim


_ITEM_BYTES = {"int8": 1, "uint8": 1, "bool": 1, "float16": 2, "bfloat16": 2, "int16": 2, "float32": 4, "int32": 4,
               "int64": 8, "float64": 8}


def _gemm(kernel: "Kernel") -> Gemm:
    """The matmul a Cube kernel does, from its output and its flops (which carry K, padded to the
    fractal, whatever the inputs' layout): a capture-time count or a builder's override alike."""
    out = kernel.output_specs[0].shape if kernel.output_specs else (1,)
    n = out[-1] if out else 1
    m = out[-2] if len(out) > 1 else 1
    batch = math.prod(out[:-2]) if len(out) > 2 else 1
    k = max(1, round(kernel.flops / (2.0 * batch * _ceil(m, 16) * _ceil(n, 16)))) if kernel.flops else 1
    item_out = kernel.output_specs[0].nbytes / max(1, math.prod(out)) if kernel.output_specs else 2
    return Gemm(batch, m, n, k, _ITEM_BYTES.get(kernel.compute_dtype, 2), item_out)


def _shape_gemm(kernel: "Kernel") -> Gemm:
    """The same from the kernel's input shapes (planning reads shapes, not flops)."""
    batch, m, n, k = matmul_dims(kernel.input_specs, kernel.output_specs)
    return Gemm(batch, m, n, k, 2, 2)


Strategy = Callable[[Gemm, "HardwareProfile"], Tiling]


def _tiles_strategy(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    return output_tiles(gemm, profile)


def _preload_tiles_strategy(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """Output tiles walked by a preloading kernel (:class:`pytest_npufuse.cost.cube.Tiling`)."""
    return output_tiles(gemm, profile)._replace(preload=True)


def _preload_nz_strategy(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """As :func:`_preload_tiles_strategy`, on a B operand already in the Cube's NZ layout (CATLASS's
    ``21_basic_matmul_preload_zN``; :mod:`pytest_npufuse.cost.cube` prices its loads)."""
    return output_tiles(gemm, profile)._replace(preload=True, nz_b=True)


def tiled_block_dim(strategy: Strategy) -> Callable[["Kernel", "HardwareProfile"], int]:
    """Launch as many cores as the tiling has tiles (capped later by the core count)."""

    def block_dim(kernel: "Kernel", profile: "HardwareProfile") -> int:
        gemm = _shape_gemm(kernel)
        return tile_count(gemm, strategy(gemm, profile))

    return block_dim


def tiled_body(strategy: Strategy) -> Callable[["Kernel", int, "HardwareProfile"], float]:
    """The Cube time of the tiling ``strategy`` (:func:`pytest_npufuse.cost.cube.cube_us`), plus a SyncAll
    if the kernel uses one."""

    def body_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
        gemm = _gemm(kernel)
        sync_us = profile.overhead_us["sync_all"] if kernel.info.sync_all else 0.0
        peak = _peak_tflops(kernel, profile)
        return sync_us + cube_us(gemm, strategy(gemm, profile), dim, kernel.bytes, peak, profile)

    return body_us


def slice_k_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """CATLASS's single-core split-K (:func:`pytest_npufuse.cost.cube.single_core_split_k`): the Cube
    part, then the AIV cast of its fp32 result, which waits for every Cube core to finish."""
    gemm = _gemm(kernel)
    return tiled_body(single_core_split_k)(kernel, dim, profile) + cast_epilogue_us(gemm, profile)


matmul_block_dim = tiled_block_dim(cann_tiling)
matmul_us = tiled_body(cann_tiling)


def vector_block_dim(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """One ``vector_block_bytes`` Vector block per slice of the larger of what the kernel reads and
    what it writes (a reduction or a router reads far more than it writes)."""
    written = sum(spec.nbytes for spec in kernel.output_specs)
    read = sum(spec.nbytes for spec in kernel.input_specs)
    return -(-max(read, written) // profile.vector_block_bytes)


def cache_update_block_dim(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """One Vector block per ``vector_block_bytes`` of the slots written (not of the cache)."""
    specs = kernel.input_specs
    destination = max(range(len(specs)), key=lambda i: specs[i].nbytes, default=-1)
    moved = sum(spec.nbytes for i, spec in enumerate(specs) if i != destination)
    return max(1, -(-moved // profile.vector_block_bytes))


def all_cores(kernel: "Kernel", profile: "HardwareProfile") -> int:
    """Every core of the kernel's engine (AI CPU kernels, MC2 kernels, which run on all AIV cores)."""
    return profile.cores(kernel.info.engine)


def one_core(kernel: "Kernel", profile: "HardwareProfile") -> int:
    return 1


# ---------------------------------------------------------------- body time


def peak_tflops(engine: str, dtype: str, profile: "HardwareProfile") -> float:
    """The peak of ``engine`` (the Cube's, else the Vector units') for ``dtype``: float32's Cube rate, or
    the Vector units' ``default`` rate, for a dtype the profile does not list."""
    if engine == "cube":
        table = profile.cube_tflops
        return table.get(dtype, table.get("float32", max(table.values())))
    table = profile.vector_tflops
    return table.get(dtype, table.get("default", min(table.values())))


def _peak_tflops(kernel: "Kernel", profile: "HardwareProfile") -> float:
    return peak_tflops(kernel.info.engine, kernel.compute_dtype, profile)


def roofline_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """An AI Core body: its SyncAll barrier if it uses one, then the slower of arithmetic and memory."""
    engine = kernel.info.engine
    share = dim / profile.cores(engine)
    compute_us = 0.0
    if kernel.flops:
        compute_us = kernel.flops / (_peak_tflops(kernel, profile) * 1e6 * profile.compute_efficiency * share)
    clock_mhz = profile.cube_mhz if engine == "cube" else profile.vector_mhz
    core_path_gbps = profile.core_ddr_bytes_per_cycle * clock_mhz * dim / 1000.0
    memory_us = kernel.bytes / (min(profile.hbm_gbps, core_path_gbps) * profile.memory_efficiency * 1e3)
    sync_us = profile.overhead_us["sync_all"] if kernel.info.sync_all else 0.0
    return sync_us + max(compute_us, memory_us)


def aicpu_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """Scalar AI CPU cores: the slower of their arithmetic and their memory path."""
    compute_us = kernel.flops / (profile.aicpu_gflops_per_core * 1e3 * dim)
    return max(compute_us, kernel.bytes / (profile.aicpu_bytes_per_us_per_core * dim))


def no_time(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    return 0.0


def _link_us(nbytes: float, profile: "HardwareProfile") -> float:
    return nbytes / (profile.comm_gbps * profile.comm_efficiency * 1e3)


def _scaleout_us(nbytes: float, profile: "HardwareProfile") -> float:
    return nbytes / (profile.comm_scaleout_gbps * profile.comm_efficiency * 1e3)


def _ring_us(nbytes: float, passes: int, profile: "HardwareProfile") -> float:
    """A ring moves its bytes in lock step over every hop, so a ring that leaves the node runs at the
    slower of the node's link and the scale-out link."""
    ranks = profile.comm_ranks
    moved = nbytes * (ranks - 1) / ranks
    link = _scaleout_us(moved, profile) if ranks > profile.comm_node_ranks else 0.0
    return passes * (ranks - 1) * profile.comm_latency_us + max(_link_us(moved, profile), link)


def exchange_us(nbytes: float, profile: "HardwareProfile") -> float:
    """A die's share ``nbytes`` of a direct exchange with every peer (MC2 dispatch/combine): (n-1)/n of it
    leaves the die, split evenly over the peers; those on the node go over its link, the others over the
    scale-out link (RoCE between A2 servers), both at once, so the slower side sets the time."""
    ranks = profile.comm_ranks
    if ranks <= 1:
        return 0.0
    near = min(ranks, profile.comm_node_ranks) - 1
    far = ranks - 1 - near
    per_peer = nbytes / ranks
    return max(_link_us(per_peer * near, profile), _scaleout_us(per_peer * far, profile))


def ring_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """A ring collective over ``ranks`` dies: (n-1)/n of its bytes cross the link, in n-1 steps of
    ``latency_us`` each per pass."""
    return _ring_us(kernel.bytes, 2 if kernel.info.cost == "all_reduce" else 1, profile)


def matmul_all_reduce_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """MatmulAllReduce (MC2): the matmul's Cube time on its cores (as ``matmul``) and a ring AllReduce of its output over
    ``ranks`` dies (two passes, as ``all_reduce``). The API page says the fused op pipelines computation
    and communication, so the body is the longer of the two (estimate: pipeline fill not counted)."""
    message = sum(spec.nbytes for spec in kernel.output_specs)
    return max(matmul_us(kernel, dim, profile), _ring_us(2 * message, 2, profile))


def reduce_scatter_product_bytes(inputs: Sequence["TensorSpec"], outputs: Sequence["TensorSpec"]) -> int:
    """The bytes of MatmulReduceScatter's whole product ``[M, N]``, which its ring reduces and scatters: the
    die's output ``[M / world_size, N]`` scaled by the left operand's M over the output's rows."""
    out = outputs[0] if outputs else None
    if out is None or len(out.shape) < 2 or not inputs or len(inputs[0].shape) < 2:
        return sum(spec.nbytes for spec in outputs)
    return out.nbytes * inputs[0].shape[-2] // max(1, out.shape[-2])


def matmul_reduce_scatter_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """MatmulReduceScatter (MC2): the matmul's Cube time (as ``matmul``, on its flops) and a one-pass ring
    ReduceScatter of the whole product (:func:`reduce_scatter_product_bytes`), pipelined as in
    :func:`matmul_all_reduce_us` (the longer of the two; estimate: pipeline fill not counted)."""
    product = reduce_scatter_product_bytes(kernel.input_specs, kernel.output_specs)
    return max(matmul_us(kernel, dim, profile), _ring_us(product, 1, profile))


def all_gather_input_bytes(inputs: Sequence["TensorSpec"], outputs: Sequence["TensorSpec"]) -> int:
    """The bytes AllGatherMatmul's ring gathers, ``[ranks x M, K]``: the die's left operand ``[M, K]``
    scaled by the product's rows over its own."""
    if not outputs or not inputs or len(outputs[0].shape) < 2 or len(inputs[0].shape) < 2:
        return sum(spec.nbytes for spec in inputs[:1])
    return inputs[0].nbytes * outputs[0].shape[-2] // max(1, inputs[0].shape[-2])


def matmul_all_gather_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """AllGatherMatmul (MC2): the gathered matmul's Cube time (as ``matmul``: ranks x M rows) and a one-pass
    ring AllGather of the left operand (:func:`all_gather_input_bytes`), pipelined as in
    :func:`matmul_all_reduce_us` (the longer of the two; estimate: pipeline fill not counted)."""
    gathered = all_gather_input_bytes(kernel.input_specs, kernel.output_specs)
    return max(matmul_us(kernel, dim, profile), _ring_us(gathered, 1, profile))


def _mc2_phase_us(profile: "HardwareProfile") -> float:
    """One handshake phase of an MC2 kernel: a fixed part and a part per peer rank whose flag it writes
    and polls."""
    return profile.mc2_phase_us + profile.mc2_rank_us * (profile.comm_ranks - 1)


def mc2_dispatch_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """Dispatch exchanges token counts, then the tokens: two handshake phases and the (n-1)/n of the
    message that leaves the die (:func:`exchange_us`), so it grows with ranks, with tokens x top-k x hidden,
    and with the share of peers on other servers."""
    return 2 * _mc2_phase_us(profile) + exchange_us(kernel.bytes, profile)


def mc2_combine_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """Combine sends the expert outputs back: one handshake phase and the message that leaves the die."""
    return _mc2_phase_us(profile) + exchange_us(kernel.bytes, profile)


def prefetch_us(kernel: "Kernel", dim: int, profile: "HardwareProfile") -> float:
    """An SDMA copy of the tensor into L2 at HBM speed."""
    return kernel.bytes / (profile.hbm_gbps * profile.memory_efficiency * 1e3)


# ---------------------------------------------------------------- the registry entries

register_cost_rule(
    "matmul", block_dim=matmul_block_dim, flops=matmul_flops, bytes=io_bytes, body_us=matmul_us, tiling="complex"
)
register_cost_rule(
    "matmul_tiles", block_dim=tiled_block_dim(_tiles_strategy), flops=matmul_flops, bytes=io_bytes,
    body_us=tiled_body(_tiles_strategy), tiling="complex",
)
register_cost_rule(
    "matmul_tiles_preload", block_dim=tiled_block_dim(_preload_tiles_strategy), flops=matmul_flops, bytes=io_bytes,
    body_us=tiled_body(_preload_tiles_strategy), tiling="complex",
)
register_cost_rule(
    "matmul_tiles_preload_nz", block_dim=tiled_block_dim(_preload_nz_strategy), flops=matmul_flops, bytes=io_bytes,
    body_us=tiled_body(_preload_nz_strategy), tiling="complex",
)
register_cost_rule(
    "matmul_split_k", block_dim=tiled_block_dim(split_k), flops=matmul_flops, bytes=io_bytes,
    body_us=tiled_body(split_k), tiling="complex",
)
register_cost_rule(
    "matmul_slice_k", block_dim=tiled_block_dim(single_core_split_k), flops=matmul_flops, bytes=io_bytes,
    body_us=slice_k_us, tiling="complex",
)
register_cost_rule(
    "linear", block_dim=matmul_block_dim, flops=matmul_flops, bytes=linear_bytes, body_us=matmul_us, tiling="complex"
)
register_cost_rule(
    "grouped_matmul", block_dim=matmul_block_dim, flops=grouped_matmul_flops, bytes=grouped_matmul_bytes, body_us=matmul_us,
    tiling="complex",
)
register_cost_rule("attention", block_dim=all_cores, flops=attention_flops, bytes=io_bytes, body_us=roofline_us, tiling="complex")
register_cost_rule(
    "elementwise", block_dim=vector_block_dim, flops=elementwise_flops, bytes=io_bytes, body_us=roofline_us,
    pointwise=True,
)
register_cost_rule("reduction", block_dim=vector_block_dim, flops=reduction_flops, bytes=io_bytes, body_us=roofline_us)
register_cost_rule("copy", block_dim=vector_block_dim, flops=no_flops, bytes=io_bytes, body_us=roofline_us)
register_cost_rule(
    "cache_update", block_dim=cache_update_block_dim, flops=no_flops, bytes=cache_update_bytes, body_us=roofline_us
)
register_cost_rule("fill", block_dim=vector_block_dim, flops=no_flops, bytes=output_bytes, body_us=roofline_us)
register_cost_rule("gather_rows", block_dim=vector_block_dim, flops=no_flops, bytes=gather_rows_bytes, body_us=roofline_us)
register_cost_rule("gather_elements", block_dim=vector_block_dim, flops=no_flops, bytes=gather_elements_bytes, body_us=roofline_us)
register_cost_rule("scatter", block_dim=vector_block_dim, flops=elementwise_flops, bytes=scatter_bytes, body_us=roofline_us)
register_cost_rule("index_put", block_dim=vector_block_dim, flops=elementwise_flops, bytes=index_put_bytes, body_us=roofline_us)
register_cost_rule("host", block_dim=one_core, flops=no_flops, bytes=no_bytes, body_us=no_time)
register_cost_rule("aicpu", block_dim=all_cores, flops=elementwise_flops, bytes=io_bytes, body_us=aicpu_us)
register_cost_rule(
    "matmul_all_reduce", block_dim=matmul_block_dim, flops=matmul_flops, bytes=io_bytes, body_us=matmul_all_reduce_us,
    tiling="complex",
)
register_cost_rule(
    "matmul_reduce_scatter", block_dim=matmul_block_dim, flops=matmul_reduce_scatter_flops, bytes=io_bytes,
    body_us=matmul_reduce_scatter_us, tiling="complex",
)
register_cost_rule("matmul_all_gather", block_dim=matmul_block_dim, flops=matmul_flops, bytes=io_bytes,
                   body_us=matmul_all_gather_us, tiling="complex")
register_cost_rule("all_reduce", block_dim=one_core, flops=no_flops, bytes=all_reduce_bytes, body_us=ring_us, hbm=False)
register_cost_rule("collective", block_dim=one_core, flops=no_flops, bytes=collective_bytes, body_us=ring_us, hbm=False)
register_cost_rule(
    "mc2_dispatch", block_dim=all_cores, flops=no_flops, bytes=dispatch_bytes, body_us=mc2_dispatch_us,
    tiling="complex", hbm=False,
)
register_cost_rule(
    "mc2_combine", block_dim=all_cores, flops=no_flops, bytes=combine_bytes, body_us=mc2_combine_us, tiling="complex",
    hbm=False,
)
register_cost_rule("prefetch", block_dim=one_core, flops=no_flops, bytes=prefetch_bytes, body_us=prefetch_us)
