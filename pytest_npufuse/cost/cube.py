"""Shape-dependent Cube time: output tiles over the cores, the K depth each tile walks, and the pipeline.

A matmul on the Cube is cut into output tiles of ``cube_tile_m x cube_tile_n`` (and, with split-K, into
K slices); each core takes one tile at a time, so ``tiles`` over ``dim`` cores run in ``ceil(tiles / dim)``
rounds: 24 tiles on 20 cores take two rounds, 20 take one (CATLASS's tuning guide measures exactly that).
Inside a tile the core loads K blocks of A and B and multiplies them at ``[efficiency] compute`` of the
per-core peak (``compute_int8`` for int8 operands); the two overlap by
``[efficiency] pipeline_overlap`` (double buffering) and the first block's load is not hidden at all
(pipeline fill, ``cube_k_block`` deep). A tile's loads come through L2: at the per-core L2 rate when
another core of the same round already brought the panel, at the per-core DDR rate for bytes that come
from HBM. All cores together cannot pull from HBM faster than its bandwidth: concurrent tiles share A
and B panels (a swizzled wave of ``r x c`` tiles reads r A-panels and c B-panels), which sets how often
each operand is read again when A and B do not stay in L2.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..target.profile import HardwareProfile

_FRACTAL = 16


class Tiling(NamedTuple):
    """Output tile rows and columns, and how many K slices each output tile is split into."""

    tile_m: int
    tile_n: int
    split_k: int


class Gemm(NamedTuple):
    """A matmul as the Cube sees it: ``batch`` products of ``m x k`` by ``k x n``, operand and result
    element sizes in bytes."""

    batch: int
    m: int
    n: int
    k: int
    item_in: float
    item_out: float


def _pad(value: int) -> int:
    return -(-max(1, value) // _FRACTAL) * _FRACTAL


def tile_count(gemm: Gemm, tiling: Tiling) -> int:
    return gemm.batch * -(-gemm.m // tiling.tile_m) * -(-gemm.n // tiling.tile_n) * tiling.split_k


def output_tiles(profile: "HardwareProfile") -> Tiling:
    return Tiling(profile.cube_tile_m, profile.cube_tile_n, 1)


def split_k(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """K split over the cores until every core has a tile, never thinner than ``decode_tile_k``."""
    tiles = tile_count(gemm, output_tiles(profile))
    wanted = -(-profile.cores("cube") // max(1, tiles))
    slices = max(1, min(wanted, -(-gemm.k // profile.decode_tile_k)))
    return Tiling(profile.cube_tile_m, profile.cube_tile_n, slices)


def cann_tiling(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """CANN's choice for its own MatMul: output tiles when they fill the Cube cores; else N split down to
    ``decode_tile_n`` columns; else also K down to ``decode_tile_k`` slices (the decode tilings)."""
    cores = profile.cores("cube")
    tiles = output_tiles(profile)
    if tile_count(gemm, tiles) >= cores:
        return tiles
    narrow = Tiling(profile.cube_tile_m, profile.decode_tile_n, 1)
    if tile_count(gemm, narrow) >= cores:
        return narrow
    return Tiling(profile.cube_tile_m, profile.decode_tile_n, -(-gemm.k // profile.decode_tile_k))


def _wave(gemm: Gemm, tiling: Tiling, dim: int) -> tuple[int, int]:
    """Tile rows and columns one round covers when its ``dim`` tiles are laid out as a square."""
    rows = gemm.batch * -(-gemm.m // tiling.tile_m)
    cols = -(-gemm.n // tiling.tile_n) * tiling.split_k
    wave_rows = max(1, min(rows, round(math.sqrt(dim))))
    return wave_rows, max(1, min(cols, -(-dim // wave_rows)))


def hbm_traffic(gemm: Gemm, tiling: Tiling, dim: int, unique_bytes: float, l2_bytes: float) -> float:
    """Bytes the kernel pulls from HBM: each operand once when A and B fit in ``l2_bytes``; otherwise A
    once per wave of columns and B once per wave of rows."""
    a = gemm.batch * gemm.m * gemm.k * gemm.item_in
    b = gemm.k * gemm.n * gemm.item_in * (gemm.batch if gemm.batch > 1 else 1)
    if a + b <= l2_bytes:
        return unique_bytes
    rows = gemm.batch * -(-gemm.m // tiling.tile_m)
    cols = -(-gemm.n // tiling.tile_n) * tiling.split_k
    wave_rows, wave_cols = _wave(gemm, tiling, dim)
    reread = a * (-(-cols // wave_cols) - 1) + b * (-(-rows // wave_rows) - 1)
    return unique_bytes + max(0.0, reread)


def _last_round_rows(gemm: Gemm, tiling: Tiling, tiles: int, dim: int) -> int:
    """Rows of the tiles in the last round. Tiles are handed out row by row, so when the last round
    holds no more tiles than a row of tiles and M leaves a short last row, it runs only short tiles
    (CATLASS's 160 x 6144 case: 48 tiles on 20 cores, the last 8 are 32 rows high)."""
    full = min(tiling.tile_m, _pad(gemm.m))
    rest = gemm.m - (-(-gemm.m // tiling.tile_m) - 1) * tiling.tile_m
    last = tiles - (-(-tiles // dim) - 1) * dim
    per_row = -(-gemm.n // tiling.tile_n) * tiling.split_k
    if gemm.batch == 1 and rest < tiling.tile_m and last <= per_row:
        return _pad(rest)
    return full


def cube_us(
    gemm: Gemm, tiling: Tiling, dim: int, unique_bytes: float, peak_tflops: float, profile: "HardwareProfile"
) -> float:
    """Body time of a tiled matmul on ``dim`` Cube cores (see the module docstring)."""
    dim = max(1, dim)
    tiles = tile_count(gemm, tiling)
    rounds = -(-tiles // dim)
    m_t, n_t = min(tiling.tile_m, _pad(gemm.m)), min(tiling.tile_n, _pad(gemm.n))
    k_t = -(-_pad(gemm.k) // tiling.split_k)
    load = (m_t + n_t) * k_t * gemm.item_in + m_t * n_t * (4 if tiling.split_k > 1 else gemm.item_out)
    traffic = hbm_traffic(gemm, tiling, dim, unique_bytes, profile.l2_mib * 2**20)
    from_hbm = min(1.0, traffic / max(1.0, rounds * dim * load))
    per_byte = (
        from_hbm / profile.core_ddr_bytes_per_cycle + (1 - from_hbm) / profile.core_l2_bytes_per_cycle
    ) / profile.cube_mhz
    core_tflops = peak_tflops / profile.cores("cube")
    efficiency = profile.compute_int8_efficiency if gemm.item_in == 1 else profile.compute_efficiency

    def tile_us(rows: int) -> float:
        compute = 2.0 * rows * n_t * k_t / (core_tflops * 1e6 * efficiency)
        move = (
            (rows + n_t) * k_t * gemm.item_in + rows * n_t * (4 if tiling.split_k > 1 else gemm.item_out)
        ) * per_byte
        return max(compute, move) + (1.0 - profile.pipeline_overlap) * min(compute, move)

    fill = (m_t + n_t) * min(profile.cube_k_block, k_t) * gemm.item_in * per_byte
    body = fill + (rounds - 1) * tile_us(m_t) + tile_us(_last_round_rows(gemm, tiling, tiles, dim))
    partials = 2.0 * tiling.split_k * gemm.batch * gemm.m * gemm.n * 4 if tiling.split_k > 1 else 0.0
    hbm_us = (traffic + partials) / (profile.hbm_gbps * profile.memory_efficiency * 1e3)
    return max(body, hbm_us)
