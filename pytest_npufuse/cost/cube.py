"""Shape-dependent Cube time: output tiles over the cores, the K depth each tile walks, and the pipeline.

The share of the Cube's peak a matmul reaches is not one constant; it comes out of four things:

- **Tile quantisation.** A matmul on the Cube is cut into output tiles of ``cube_tile_m x cube_tile_n``
  (and, with split-K, into K slices); each core takes one tile at a time, so ``tiles`` over ``dim`` cores
  run in ``ceil(tiles / dim)`` rounds: 24 tiles on 20 cores take two rounds, 20 take one (CATLASS's
  tuning guide measures exactly that). An edge tile is padded to the 16x16x16 fractal (``_pad``), so a
  GEMM one element over a tile pays a fractal-high tile more, and another round when it overflows the
  cores.
- **The Cube's own pace** (:func:`cube_tile_us`): a tile's MMADs run at ``[efficiency] cube_tile`` of the
  per-core peak (``compute_int8`` for int8 operands) once its pipeline is full, unless MTE1 cannot feed
  L0A and L0B that fast (``[core_memory] l0a_bytes_per_cycle`` / ``l0b_bytes_per_cycle``): a skinny tile
  brings a whole B row into L0B for every K step while its MMADs fill a sixteenth of the Cube.
- **K depth.** A ping-pong block MMAD (CATLASS's ``MmadAtlasA2Pingpong``, and CANN's MatMul priced the
  same) loads each tile's first K block (``cube_k_block`` deep) before its Cube can start, and
  double-buffers only the blocks after it: every tile pays that fill, so a shallow K (few blocks)
  reaches a small share of the peak and a deep one approaches the Cube's own pace. The later blocks'
  loads overlap the Cube by ``[efficiency] pipeline_overlap``. A preloading kernel (CATLASS's
  ``MmadAtlasA2Preload``, which also fetches the next tile's first block during the current tile) hides
  the shorter of a tile's loads and its Cube work entirely, leaving only the kernel's first fill.
- **The memory path.** A tile's loads come through L2: at the per-core L2 rate when another core of the
  same round already brought the panel, at the per-core DDR rate for bytes that come from HBM. All cores
  together cannot pull from HBM faster than its bandwidth: concurrent tiles share A and B panels (a
  swizzled wave of ``r x c`` tiles reads r A-panels and c B-panels), which sets how often each operand is
  read again when A and B do not stay in L2.
- **The operand's layout.** A row-major (ND) operand reaches L1 through MTE2's ND2NZ conversion, one
  strided burst per tile row (``DataCopy`` with ``Nd2NzParams``, CATLASS ``CopyGmToL1`` RowMajor -> zN;
  CATLASS's matmul design summary: ND2NZ "has bandwidth loss" against a copy without conversion): its HBM
  bytes come at the per-core DDR rate above. An operand already in the Cube's NZ layout (CATLASS's zN
  B, ``nz_b``) is one contiguous run of fractals per K block, which MTE2 streams at its full per-core
  read rate (``l2_bytes_per_cycle``) from L2 and HBM alike, all cores together still capped by HBM's
  bandwidth. The training rows measure it: the same 20x6144x16384 GEMM on the same tiles takes 181 and
  140 us with B in NZ against 239 and 252 us with B row-major. A row-major A (an activation ``[M, K]``)
  whose rows are not a multiple of 512 bytes apart starts most of its bursts off a 512-byte boundary,
  which on Atlas A2 costs up to 30% of the rate (``[memory] misaligned_read_share``, Ascend C best
  practices; CATLASS's matmul summary: a srcDValue not 512-byte aligned "decreases bandwidth
  significantly"). B's stride depends on its layout, which shapes do not give: it is taken as aligned.
- **Row by row past the stride limit.** ND2NZ's source stride (``srcDValue``) is a 16-bit field: when
  a row-major A's rows are ``STRIDE_LIMIT`` (65536) elements apart or more, CATLASS's ``CopyGmToL1``
  (RowMajor -> zN) falls back to one ``DataCopy`` per tile row and K block (hicann/catlass
  include/catlass/catlass.hpp and include/catlass/gemm/tile/atlasa2/copy_gm_to_l1.hpp @0dfcf9df). Each
  such copy pays ``[core_memory] row_copy_cycles`` beside its bytes: one ND2NZ copy of a whole block
  streams its rows' bursts back to back, a copy of one row waits for its own. The training rows that
  measure it are CATLASS's 80000-deep GEMMs (7x and 3.6x the time of the 40000-deep ones).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NamedTuple

if TYPE_CHECKING:
    from ..target.profile import HardwareProfile

_FRACTAL = 16
_BURST_ALIGN = 512  # bytes: the GM alignment MTE2 reads best from (Ascend C best practices)
_STRIDE_LIMIT = 65536  # elements: ND2NZ's srcDValue limit (CATLASS catlass.hpp STRIDE_LIMIT)


class Tiling(NamedTuple):
    """Output tile rows and columns, how many K slices each output tile is split into, the order the
    tiles are handed to the cores in (CATLASS's ``GemmIdentityBlockSwizzle<offset, direction>``),
    whether a core keeps its A block in L1 while it sweeps N (CATLASS's single-core split-K),
    whether the kernel preloads: loads the next K block (and the next tile's first one) while the Cube
    works on the current one (CATLASS's ``MmadAtlasA2Preload``), so a tile's loads hide entirely under
    its Cube work or the reverse, and whether A or B is already in the Cube's NZ layout in memory (no
    ND2NZ conversion on the way into L1; see the module docstring)."""

    tile_m: int
    tile_n: int
    split_k: int
    swizzle: tuple[int, int] = (1, 0)
    resident_a: bool = False
    preload: bool = False
    nz_a: bool = False
    nz_b: bool = False


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


def output_tiles(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    return Tiling(profile.cube_tile_m, profile.cube_tile_n, 1, swizzle_for(gemm, profile))


def split_k(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """K split over the cores until every core has a tile, never thinner than ``decode_tile_k``."""
    tiles = tile_count(gemm, output_tiles(gemm, profile))
    wanted = -(-profile.cores("cube") // max(1, tiles))
    slices = max(1, min(wanted, -(-gemm.k // profile.decode_tile_k)))
    return Tiling(profile.cube_tile_m, profile.cube_tile_n, slices, swizzle_for(gemm, profile))


def cann_tiling(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """CANN's choice for its own MatMul: output tiles when they fill the Cube cores; else N split down to
    ``decode_tile_n`` columns; else also K down to ``decode_tile_k`` slices (the decode tilings)."""
    cores = profile.cores("cube")
    tiles = output_tiles(gemm, profile)
    if tile_count(gemm, tiles) >= cores:
        return tiles
    narrow = Tiling(profile.cube_tile_m, profile.decode_tile_n, 1, tiles.swizzle)
    if tile_count(gemm, narrow) >= cores:
        return narrow
    return Tiling(profile.cube_tile_m, profile.decode_tile_n, -(-gemm.k // profile.decode_tile_k), tiles.swizzle)


def _wave(gemm: Gemm, tiling: Tiling, dim: int) -> tuple[int, int]:
    """Tile rows and columns one round covers when its ``dim`` tiles are laid out as a square."""
    rows = gemm.batch * -(-gemm.m // tiling.tile_m)
    cols = -(-gemm.n // tiling.tile_n) * tiling.split_k
    wave_rows = max(1, min(rows, round(math.sqrt(dim))))
    return wave_rows, max(1, min(cols, -(-dim // wave_rows)))


def hbm_traffic(gemm: Gemm, tiling: Tiling, dim: int, unique_bytes: float, l2_bytes: float) -> float:
    """Bytes the kernel pulls from HBM: each operand once when A and B fit in ``l2_bytes`` or when the
    cores walk K in step (``resident_a``: every core is on the same K slice, so only that slice of A and
    B is live); otherwise A once per wave of columns and B once per wave of rows. In a batched matmul
    each batch multiplies its own A by its own B, so a wave's tile rows from different batches share no B
    panel: B is read again only for the tile rows of one batch beyond those a wave covers (a decode
    ``[b, 1, k] x [b, k, n]`` reads each B once, as one tile row a batch)."""
    a = gemm.batch * gemm.m * gemm.k * gemm.item_in
    b = gemm.k * gemm.n * gemm.item_in * (gemm.batch if gemm.batch > 1 else 1)
    if a + b <= l2_bytes or tiling.resident_a:
        return unique_bytes
    rows = -(-gemm.m // tiling.tile_m)
    cols = -(-gemm.n // tiling.tile_n) * tiling.split_k
    wave_rows, wave_cols = _wave(gemm, tiling, dim)
    reread = a * (-(-cols // wave_cols) - 1) + b * (-(-rows // min(rows, wave_rows)) - 1)
    return unique_bytes + max(0.0, reread)


def swizzle_for(gemm: Gemm, profile: "HardwareProfile") -> tuple[int, int]:
    """The tile order ``(offset, direction)``: the profile's offset, and its direction, where ``auto``
    picks CATLASS's advice (swizzle design doc): Zn (0) when M >= N, Nz (1) when M < N."""
    direction = profile.cube_swizzle_direction
    if direction == "auto":
        return profile.cube_swizzle_offset, 0 if gemm.m >= gemm.n else 1
    return profile.cube_swizzle_offset, {"zn": 0, "nz": 1}[direction]


def block_coord(index: int, loops_m: int, loops_n: int, swizzle: tuple[int, int]) -> tuple[int, int]:
    """Row and column of the ``index``-th output tile in CATLASS's ``GemmIdentityBlockSwizzle``
    order: bands of ``offset`` tile rows (Zn) or columns (Nz), walked in an S so that consecutive
    bands share the tiles at their turn."""
    offset, direction = max(1, swizzle[0]), swizzle[1]
    outer, inner = (loops_m, loops_n) if direction == 0 else (loops_n, loops_m)
    band, within = divmod(index, offset * inner)
    width = min(offset, outer - band * offset)
    across, along = band * offset + within % width, within // width
    if band % 2 == 1:
        along = inner - along - 1
    return (across, along) if direction == 0 else (along, across)


def block_index(row: int, col: int, loops_m: int, loops_n: int, swizzle: tuple[int, int]) -> int:
    """The position of tile ``(row, col)`` in :func:`block_coord`'s order (its inverse)."""
    offset, direction = max(1, swizzle[0]), swizzle[1]
    outer, inner = (loops_m, loops_n) if direction == 0 else (loops_n, loops_m)
    across, along = (row, col) if direction == 0 else (col, row)
    band = across // offset
    width = min(offset, outer - band * offset)
    if band % 2 == 1:
        along = inner - along - 1
    return band * offset * inner + along * width + across - band * offset


# Beyond this many tiles to walk one by one (edge tiles, or a single-core split-K's output tiles), every
# tile is priced as a full one (edge tiles are then a few percent of a core's work) and a single-core
# split-K's A blocks are counted band by band: walking every tile would cost more host time than the
# answer is worth.
_EXACT_TILES = 32768


class _Edges(NamedTuple):
    """Tile counts along M and N and the (padded) rows and columns of the last ones."""

    loops_m: int
    loops_n: int
    last_m: int
    last_n: int


def _edges(gemm: Gemm, tiling: Tiling) -> _Edges:
    loops_m, loops_n = -(-gemm.m // tiling.tile_m), -(-gemm.n // tiling.tile_n)
    last_m = _pad(gemm.m - (loops_m - 1) * tiling.tile_m)
    last_n = _pad(gemm.n - (loops_n - 1) * tiling.tile_n)
    return _Edges(loops_m, loops_n, min(last_m, tiling.tile_m), min(last_n, tiling.tile_n))


def _range_owner(blocks: int, dim: int) -> Callable[[int], int]:
    """The core of each output tile when every core takes one contiguous run of tiles and walks all of
    K on it (CATLASS's ``SingleCoreSplitkGemmIdentityBlockSwizzle``: the first cores take one tile more
    when the tiles do not divide evenly)."""
    per = -(-blocks // dim)
    longer = blocks - dim * (per - 1)

    def owner(block: int) -> int:
        if block < longer * per:
            return block // per
        return longer + (block - longer * per) // max(1, per - 1)

    return owner


TileTime = Callable[[int, int], float]


def busiest_core_us(
    gemm: Gemm, tiling: Tiling, dim: int, tile_us: Callable[[int, int], float], a_load_us: Callable[[int], float]
) -> float:
    """The time of the core with the most work, each core's time the sum of its tiles' times
    (``tile_us(rows, cols)``: an edge tile is shorter or narrower than a full one). CATLASS kernels hand
    tile ``t`` (in swizzle order, K slices of one output tile consecutive, batches outermost) to core
    ``t mod dim`` (CATLASS's tuning guide: 24 tiles on 20 cores, swizzle <3,1> against <4,1>); with
    ``resident_a`` each core takes a contiguous run of output tiles instead and loads each A block it
    touches once (``a_load_us(rows)``)."""
    if not gemm.m or not gemm.n or not gemm.batch:  # an empty output: no tile, no core busy
        return 0.0
    edges = _edges(gemm, tiling)
    times: dict[tuple[int, int], float] = {}

    def tile_time(row: int, col: int) -> float:
        rows = min(edges.last_m if row == edges.loops_m - 1 else tiling.tile_m, _pad(gemm.m))
        cols = min(edges.last_n if col == edges.loops_n - 1 else tiling.tile_n, _pad(gemm.n))
        if (rows, cols) not in times:
            times[rows, cols] = tile_us(rows, cols)
        return times[rows, cols]

    if tiling.resident_a:
        return _contiguous_runs_us(gemm, tiling, dim, edges, tile_time, a_load_us)
    return _round_robin_us(gemm, tiling, dim, edges, tile_time)


def _round_robin_us(gemm: Gemm, tiling: Tiling, dim: int, edges: _Edges, tile_time: TileTime) -> float:
    """Tile ``t`` on core ``t mod dim``: every core's count of full tiles, corrected for the edge tiles
    it holds (the last tile row and column, found by :func:`block_index`)."""
    blocks = edges.loops_m * edges.loops_n
    tiles = gemm.batch * blocks * tiling.split_k
    full = tile_time(0, 0)  # a full tile, or the only shape when M or N is a single tile
    base, extra = divmod(tiles, dim)
    totals = [full * (base + (core < extra)) for core in range(min(dim, tiles))]
    edge_tiles = {(edges.loops_m - 1, col) for col in range(edges.loops_n)}
    edge_tiles |= {(row, edges.loops_n - 1) for row in range(edges.loops_m)}
    if len(edge_tiles) * gemm.batch * tiling.split_k > _EXACT_TILES:
        return max(totals)
    for row, col in edge_tiles:
        delta = tile_time(row, col) - full
        if not delta:
            continue
        block = block_index(row, col, edges.loops_m, edges.loops_n, tiling.swizzle)
        for batch in range(gemm.batch):
            first = (batch * blocks + block) * tiling.split_k
            for task in range(first, first + tiling.split_k):
                totals[task % dim] += delta
    return max(totals)


def _contiguous_runs_us(
    gemm: Gemm, tiling: Tiling, dim: int, edges: _Edges, tile_time: TileTime, a_load_us: Callable[[int], float]
) -> float:
    """Each core walks K over its contiguous run of output tiles (:func:`_range_owner`), loading each
    A block (tile row, K slice) once."""
    blocks = edges.loops_m * edges.loops_n
    if gemm.batch * blocks > _EXACT_TILES:
        return _contiguous_runs_of_full_tiles_us(gemm, tiling, dim, edges, tile_time(0, 0), a_load_us)
    owner = _range_owner(gemm.batch * blocks, dim)
    totals = [0.0] * min(dim, gemm.batch * blocks)
    rows_held: set[tuple[int, int, int]] = set()
    for task in range(gemm.batch * blocks):
        batch, block = divmod(task, blocks)
        row, col = block_coord(block, edges.loops_m, edges.loops_n, tiling.swizzle)
        core = owner(task)
        totals[core] += tiling.split_k * tile_time(row, col)
        if (core, batch, row) not in rows_held:
            rows_held.add((core, batch, row))
            rows = min(edges.last_m if row == edges.loops_m - 1 else tiling.tile_m, _pad(gemm.m))
            totals[core] += tiling.split_k * a_load_us(rows)
    return max(totals)


def _contiguous_runs_of_full_tiles_us(
    gemm: Gemm, tiling: Tiling, dim: int, edges: _Edges, full_tile_us: float, a_load_us: Callable[[int], float]
) -> float:
    """:func:`_contiguous_runs_us` beyond ``_EXACT_TILES`` tiles: every tile and A block priced as a full
    one (an edge tile is cheaper, so this never undercuts the walk), each core's run taken whole and its
    A blocks counted per band of the tile order (:func:`_rows_held`) instead of per tile."""
    tasks = gemm.batch * edges.loops_m * edges.loops_n
    per = -(-tasks // dim)
    longer = tasks - dim * (per - 1)  # the first cores take one tile more (:func:`_range_owner`)
    a_block_us = a_load_us(min(tiling.tile_m, _pad(gemm.m)))
    worst, start = 0.0, 0
    for core in range(dim):
        length = per if core < longer else per - 1
        rows = _rows_held(start, start + length, edges, tiling.swizzle)
        worst = max(worst, tiling.split_k * (length * full_tile_us + rows * a_block_us))
        start += length
    return worst


def _rows_held(start: int, stop: int, edges: _Edges, swizzle: tuple[int, int]) -> int:
    """The distinct (batch, tile row) pairs among tasks ``[start, stop)`` (batches outermost, each in
    :func:`block_coord`'s order): the A blocks a core with that run loads."""
    blocks = edges.loops_m * edges.loops_n
    if stop <= start:
        return 0
    first, last = start // blocks, (stop - 1) // blocks
    if first == last:
        return _rows_touched(start - first * blocks, stop - first * blocks, edges, swizzle)
    head = _rows_touched(start - first * blocks, blocks, edges, swizzle)
    tail = _rows_touched(0, stop - last * blocks, edges, swizzle)
    return head + (last - first - 1) * edges.loops_m + tail


def _rows_touched(lo: int, hi: int, edges: _Edges, swizzle: tuple[int, int]) -> int:
    """The distinct tile rows among blocks ``[lo, hi)`` of one batch in :func:`block_coord`'s order,
    counted band by band: a Zn band (``offset`` rows) cycles through its rows tile by tile, so ``n`` of its
    tiles touch ``min(width, n)`` rows; an Nz band (``offset`` columns) walks down the rows ``width`` tiles
    at a time, in an S, so its tiles touch one interval of rows, and a band walked whole touches all."""
    offset, direction = max(1, swizzle[0]), swizzle[1]
    outer, inner = (edges.loops_m, edges.loops_n) if direction == 0 else (edges.loops_n, edges.loops_m)
    band_tiles = offset * inner
    first, last = lo // band_tiles, (hi - 1) // band_tiles
    middle = max(0, last - first - 1)  # bands walked whole, each ``offset`` wide (only the final one is narrower)
    if direction == 1 and middle:
        return inner
    rows = middle * offset
    touched: set[int] = set()
    for band in dict.fromkeys((first, last)):
        width = min(offset, outer - band * offset)
        begin = max(lo, band * band_tiles) - band * band_tiles
        end = min(hi, band * band_tiles + width * inner) - band * band_tiles
        if direction == 0:
            rows += min(width, end - begin)
        else:
            along = range(begin // width, (end - 1) // width + 1)
            touched.update(inner - 1 - row if band % 2 else row for row in along)
    return rows + len(touched)


def cube_us(
    gemm: Gemm, tiling: Tiling, dim: int, unique_bytes: float, peak_tflops: float, profile: "HardwareProfile"
) -> float:
    """Body time of a tiled matmul on ``dim`` Cube cores (see the module docstring)."""
    dim = max(1, dim)
    misaligned = (not tiling.nz_a and (gemm.k * gemm.item_in) % _BURST_ALIGN != 0, False)
    row_by_row = (not tiling.nz_a and gemm.k >= _STRIDE_LIMIT, False)
    held, tiling = _held_along_n(gemm, tiling)
    if held is not gemm:  # the operands swapped places
        misaligned, row_by_row, gemm = misaligned[::-1], row_by_row[::-1], held
    tiles = tile_count(gemm, tiling)
    rounds = -(-tiles // dim)
    m_t, n_t = min(tiling.tile_m, _pad(gemm.m)), min(tiling.tile_n, _pad(gemm.n))
    k_t = -(-_pad(gemm.k) // tiling.split_k)
    out_item = 4 if tiling.split_k > 1 else gemm.item_out
    a_item = 0 if tiling.resident_a else gemm.item_in
    load = (m_t * a_item + n_t * gemm.item_in) * k_t + m_t * n_t * out_item
    traffic = hbm_traffic(gemm, tiling, dim, unique_bytes, profile.l2_mib * 2**20)
    from_hbm = min(1.0, traffic / max(1.0, rounds * dim * load))
    per_byte = (
        from_hbm / profile.core_ddr_bytes_per_cycle + (1 - from_hbm) / profile.core_l2_bytes_per_cycle
    ) / profile.cube_mhz
    a_per_byte, b_per_byte = (
        _layout_per_byte(nz, off, per_byte, profile) for nz, off in zip((tiling.nz_a, tiling.nz_b), misaligned)
    )
    core_tflops = peak_tflops / profile.cores("cube")
    efficiency = profile.compute_int8_efficiency if gemm.item_in == 1 else profile.cube_tile_efficiency
    first_block = min(profile.cube_k_block, k_t)
    # One DataCopy per operand row and K block (a single-core split-K's slice is one L1 block) when the
    # operand goes row by row (module docstring).
    copy_us = profile.core_row_copy_cycles / profile.cube_mhz
    a_copy_us, b_copy_us = (copy_us if flag else 0.0 for flag in row_by_row)
    blocks = 1 if tiling.resident_a else -(-k_t // first_block)

    def parts(rows: int, cols: int) -> tuple[float, float, float]:
        """A tile's Cube time, all its loads, and the load of its first K block."""
        compute = cube_tile_us(rows, cols, k_t, gemm.item_in, core_tflops, efficiency, profile)
        operands = rows * a_item * a_per_byte + cols * gemm.item_in * b_per_byte
        copies = rows * a_copy_us * (a_item > 0) + cols * b_copy_us
        first = operands * first_block + copies
        return compute, operands * k_t + copies * blocks + rows * cols * out_item * per_byte, first

    def filled_us(compute: float, move: float, fill: float, overlap: float = profile.pipeline_overlap) -> float:
        """A tile that waits for its first K block, then overlaps the rest of its loads with its Cube."""
        rest = move - fill
        return fill + max(compute, rest) + (1.0 - overlap) * min(compute, rest)

    def tile_us(rows: int, cols: int) -> float:
        compute, move, fill = parts(rows, cols)
        return max(compute, move) if tiling.preload else filled_us(compute, move, fill)

    def a_load_us(rows: int) -> float:
        return rows * (k_t * gemm.item_in * a_per_byte + blocks * a_copy_us)

    # A preloading kernel's first tile still waits for its first block; the later ones find theirs loaded.
    first = parts(m_t, n_t)
    fill = filled_us(*first, overlap=1.0) - max(first[0], first[1]) if tiling.preload else 0.0
    body = fill + busiest_core_us(gemm, tiling, dim, tile_us, a_load_us)
    partials = _partials_bytes(gemm, tiling)
    hbm_us = (traffic + partials) / (profile.hbm_gbps * profile.memory_efficiency * 1e3)
    return max(body, hbm_us)


def _layout_per_byte(nz: bool, misaligned: bool, per_byte: float, profile: "HardwareProfile") -> float:
    """Microseconds per byte of an operand on one core: a row-major operand's (``per_byte``, its L2 and
    HBM shares at their per-core rates, slower by ``misaligned_read_share`` when its rows start off 512-byte
    boundaries), or an NZ operand's, streamed at MTE2's full read rate wherever it comes from (see the
    module docstring)."""
    if nz:
        return 1.0 / (profile.core_l2_bytes_per_cycle * profile.cube_mhz)
    return per_byte / profile.misaligned_read_share if misaligned else per_byte


def cube_tile_us(
    rows: int, cols: int, depth: int, item: float, core_tflops: float, efficiency: float, profile: "HardwareProfile"
) -> float:
    """The Cube's own time on one ``rows x cols`` output tile walked ``depth`` deep, once its operands
    (``item`` bytes an element) are in L1: the MMADs at ``efficiency`` of the core's peak (``rows``,
    ``cols`` and ``depth`` already padded to the 16x16x16 fractal, so a tile one element over costs a
    whole fractal more), or, when longer, MTE1 feeding them from L1 into L0A and L0B at ``[core_memory]
    l0a_bytes_per_cycle`` and ``l0b_bytes_per_cycle``. CATLASS's block MMADs split L0A and L0B into two
    stages, so MTE1 and the MMADs overlap and the slower sets the pace: for each 16 of K a 128x256 fp16
    tile needs 2.5 cycles of feed against 8 of MMAD at the peak, a 32x256 one (a decode GEMM's M padded
    to its fractal) 2.1 against 2, a 16x256 one 2.06 against 1: a skinny tile is fed, not computed."""
    mmad = 2.0 * rows * cols * depth / (core_tflops * 1e6 * efficiency)
    feed_cycles = depth * item * (rows / profile.core_l0a_bytes_per_cycle + cols / profile.core_l0b_bytes_per_cycle)
    return max(mmad, feed_cycles / profile.cube_mhz)


def _partials_bytes(gemm: Gemm, tiling: Tiling) -> float:
    """HBM bytes of split-K's fp32 partial sums: every slice written and read back by the reduction
    (multi-core split-K), or, when each core accumulates its slices in place with atomic adds
    (``resident_a``, single-core split-K), the one fp32 result written and read back by the cast."""
    if tiling.split_k <= 1:
        return 0.0
    outputs = gemm.batch * gemm.m * gemm.n * 4
    return 2.0 * outputs * (1 if tiling.resident_a else tiling.split_k)


def single_core_split_k(gemm: Gemm, profile: "HardwareProfile") -> Tiling:
    """CATLASS's single-core split-K (example 34): L1 tiles of ``slice_k_tile_m x slice_k_tile_n``, K
    walked in slices of ``slice_k_depth_bytes``, each core keeping its A block in L1 while it sweeps
    its run of output tiles along N (Nz order) and adding every slice's partial tile into the fp32
    result with atomic adds. Its block MMAD preloads the next slice's blocks while the Cube works on the
    current one (the example's design note: ``gmOffsetNextA/B``, ``needLoadNextA/B``). When M > N the
    example transposes all of it (128x256 tiles, Zn order, the B block held): :func:`cube_us` prices
    that as the transposed product."""
    rows, cols, direction = profile.slice_k_tile_m, profile.slice_k_tile_n, 1
    if gemm.m > gemm.n:
        rows, cols, direction = cols, rows, 0
    depth = max(_FRACTAL, profile.slice_k_depth_bytes // max(1, int(gemm.item_in)))
    return Tiling(
        rows, cols, -(-gemm.k // depth), (profile.cube_swizzle_offset, direction), resident_a=True, preload=True
    )


def _held_along_n(gemm: Gemm, tiling: Tiling) -> tuple[Gemm, Tiling]:
    """A single-core split-K that holds B (M > N) as the transposed product C^T = B^T A^T, which holds
    its A: the same tiles, loads and order with rows and columns swapped."""
    if not tiling.resident_a or gemm.m <= gemm.n:
        return gemm, tiling
    swizzle = (tiling.swizzle[0], 1 - tiling.swizzle[1])
    swapped = tiling._replace(
        tile_m=tiling.tile_n, tile_n=tiling.tile_m, swizzle=swizzle, nz_a=tiling.nz_b, nz_b=tiling.nz_a
    )
    return gemm._replace(m=gemm.n, n=gemm.m), swapped


def cast_epilogue_us(gemm: Gemm, profile: "HardwareProfile") -> float:
    """The AIV pass that casts single-core split-K's fp32 result to the output dtype after the Cube
    has finished (CATLASS's ``RemovePaddingNDAndCastC``): the fp32 result read and the output written,
    at the HBM rate."""
    nbytes = gemm.batch * gemm.m * gemm.n * (4 + gemm.item_out)
    return nbytes / (profile.hbm_gbps * profile.memory_efficiency * 1e3)
