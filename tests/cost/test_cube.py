"""Shape-dependent Cube time (issue 21): tiles over cores, K depth, pipeline fill and the memory path."""

from dataclasses import replace

import pytest

from pytest_npufuse import cost
from pytest_npufuse.cost.cube import (
    Gemm, Tiling, block_coord, block_index, cube_tile_us, cube_us, hbm_traffic, single_core_split_k,
)
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

B3 = load_profile("910b3")  # 20 Cube cores
CATALOG = load_catalog(
    {
        "t::tiles": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_tiles",
        },
        "t::preload": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_tiles_preload",
        },
        "t::preload_nz": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_tiles_preload_nz",
        },
        "t::split_k": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_split_k",
        },
        "t::slice_k": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_slice_k",
        },
    }
)


def matmul(op, m, n, k, dtype="float16"):
    builder = ProgramBuilder(CATALOG)
    a, b = builder.input("a", (m, k), dtype), builder.input("b", (k, n), dtype)
    out = builder.op(op, [a, b], (m, n), "float16")
    return next(kernel for kernel in builder.kernels if kernel.node == out)


def body(kernel, profile=B3):
    return cost.body_us(kernel, cost.block_dim(kernel, profile), profile)


def test_tiles_that_overflow_the_cores_by_one_take_another_round():
    """CATLASS's tuning guide: 24 tiles of 128x256 on 20 cores run in two rounds, 20 tiles of 256x128
    in one; the same GEMM nearly halves."""
    kernel = matmul("t::tiles", 1024, 576, 6144)
    wide = body(kernel)
    balanced = body(kernel, replace(B3, cube_tile_m=256, cube_tile_n=128))
    assert cost.cost_rule("matmul_tiles").block_dim(kernel, B3) == 24 and cost.block_dim(kernel, B3) == B3.aic
    assert 1.6 < wide / balanced < 2.1


def test_a_one_tile_matmul_walks_k_on_one_core_and_split_k_spreads_it():
    """A 128x256 output is one tile: without split-K one core walks all of K, so time grows with K;
    split-K gives every core a slice and stays nearly flat (CATLASS's split-K example)."""
    one_core = [body(matmul("t::tiles", 128, 256, k, "int8")) for k in (1024, 4096, 16384)]
    spread = [body(matmul("t::split_k", 128, 256, k, "int8")) for k in (1024, 4096, 16384)]
    assert one_core[2] > 8 * one_core[0]
    assert spread[2] < one_core[2] / 5
    assert cost.block_dim(matmul("t::split_k", 128, 256, 16384, "int8"), B3) == B3.aic


def test_the_pipeline_hides_loads_under_the_cube_only_as_far_as_it_overlaps():
    kernel = matmul("t::tiles", 2048, 2048, 4096)
    serial, overlapped = (
        body(kernel, replace(B3, pipeline_overlap=0.0)),
        body(kernel, replace(B3, pipeline_overlap=1.0)),
    )
    assert serial > 1.3 * overlapped


def test_a_preloading_kernel_hides_a_tiles_loads_whatever_the_overlap_estimate():
    """CATLASS's preloading block MMAD (examples 06 and 21) fetches the next K block, and the next tile's
    first, while the Cube works: its tiles cost the longer of their loads and their Cube work; a ping-pong
    kernel still waits for each tile's first block even were its overlap estimate complete; the same
    tiles and cores."""
    shape = (2048, 2048, 4096)
    preload, pingpong = matmul("t::preload", *shape), matmul("t::tiles", *shape)
    assert cost.block_dim(preload, B3) == cost.block_dim(pingpong, B3)
    assert body(preload) <= body(pingpong, replace(B3, pipeline_overlap=1.0))
    assert body(preload) == body(preload, replace(B3, pipeline_overlap=0.0))
    assert body(preload) < body(pingpong) / 1.2


def test_operands_that_outgrow_l2_are_read_again_per_wave():
    small = Gemm(1, 2048, 2048, 2048, 2, 2)
    large = Gemm(1, 4096, 4096, 40000, 2, 2)
    unique = lambda g: (g.m * g.k + g.k * g.n + g.m * g.n) * 2  # noqa: E731
    tiling = Tiling(128, 256, 1)
    l2 = B3.l2_mib * 2**20
    assert hbm_traffic(small, tiling, 20, unique(small), l2) == unique(small)
    assert hbm_traffic(large, tiling, 20, unique(large), l2) > 3 * unique(large)


def test_cube_efficiency_depends_on_the_shape():
    """A flat efficiency priced every GEMM alike; a large one keeps every core busy on deep tiles while
    a skinny decode GEMM (M = 16) wastes most of each 16-row fractal and waits on its weights."""
    peak = B3.cube_tflops["float16"] * 1e6

    def share_of_peak(m, n, k):
        gemm = Gemm(1, m, n, k, 2, 2)
        time = cube_us(gemm, Tiling(128, 256, 1), B3.aic, (m * k + k * n + m * n) * 2, B3.cube_tflops["float16"], B3)
        return 2 * m * n * k / peak / time

    assert share_of_peak(8192, 8192, 8192) > 3 * share_of_peak(16, 8192, 8192)
    assert share_of_peak(8192, 8192, 8192) > share_of_peak(512, 512, 8192)


def test_tiles_go_to_the_cores_in_catlass_swizzle_order():
    """CATLASS's GemmIdentityBlockSwizzle<3, 0> walks bands of three tile rows in an S: the tenth tile
    (index 9) starts the second band at its last column."""
    order = [block_coord(i, 8, 3, (3, 0)) for i in range(12)]
    assert order[:4] == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert order[9:12] == [(3, 2), (4, 2), (5, 2)]
    assert block_coord(4, 2, 24, (3, 1)) == (1, 1)  # Nz: bands of three tile columns, rows inside


def test_a_tile_position_in_the_swizzle_order_inverts_its_coordinates():
    """The per-core sum finds each edge tile's core from its position in the order; the position must
    be the one block_coord walks, for every band width, direction and a band cut short."""
    for loops in ((8, 3), (2, 24), (7, 5), (1, 9), (13, 1)):
        for swizzle in ((3, 0), (3, 1), (4, 1), (1, 0), (20, 1)):
            for index in range(loops[0] * loops[1]):
                assert block_index(*block_coord(index, *loops, swizzle), *loops, swizzle) == index


def test_swizzle_decides_which_core_gets_the_short_edge_tiles():
    """CATLASS's tuning guide, 160 x 6144 x 2048 on 20 cores: 48 tiles, a row of 128-high and one of
    32-high. Swizzle <3,1> leaves cores with 128 + 128 + 32 rows, <4,1> at most 128 + 128: faster."""
    gemm = Gemm(1, 160, 6144, 2048, 2, 2)
    unique = (160 * 2048 + 2048 * 6144 + 160 * 6144) * 2
    peak = B3.cube_tflops["float16"]
    three, four = (
        cube_us(gemm, Tiling(128, 256, 1, (offset, 1)), B3.aic, unique, peak, B3) for offset in (3, 4)
    )
    assert 1.05 < three / four < 1.4


def test_a_narrow_edge_tile_costs_less_than_a_full_one():
    """1024 x 576 in 128 x 256 tiles is 8 x 3 tiles whose last column is 64 wide: on 20 cores the four
    cores with two tiles take less than two full tiles' time when one of them is an edge tile."""
    full = Gemm(1, 1024, 768, 6144, 2, 2)
    edged = Gemm(1, 1024, 576, 6144, 2, 2)
    unique = lambda g: (g.m * g.k + g.k * g.n + g.m * g.n) * 2  # noqa: E731
    peak = B3.cube_tflops["float16"]
    tiling = Tiling(128, 256, 1, (3, 0))
    assert cube_us(edged, tiling, B3.aic, unique(edged), peak, B3) < cube_us(full, tiling, B3.aic, unique(full), peak, B3)


def test_single_core_split_k_keeps_a_in_l1_and_beats_the_basic_tiling_on_deep_k():
    """CATLASS example 34: each core keeps its A block in L1 and sweeps N, adding each K slice into
    the fp32 result atomically; it moves less from GM than the basic kernel on a large GEMM with a deep
    K (the example's table: 1.3-1.7x faster), then casts the result on the AIV. When M > N it holds
    B instead, priced as the transposed product."""
    a2 = load_profile("910b2")
    gemm = Gemm(1, 4096, 4096, 40000, 2, 2)
    tiling = single_core_split_k(gemm, a2)
    assert (tiling.tile_m, tiling.tile_n, tiling.resident_a) == (256, 128, True)
    assert tiling.split_k == -(-40000 // 512)
    builder = ProgramBuilder(CATALOG)
    a, b = builder.input("a", (4096, 40000)), builder.input("b", (40000, 4096))
    out = builder.op("t::slice_k", [a, b], (4096, 4096))
    basic = builder.op("t::tiles", [a, b], (4096, 4096))
    kernels = {kernel.node: kernel for kernel in builder.kernels}
    assert body(kernels[out], a2) < body(kernels[basic], a2)
    resident = cube_us(gemm, tiling, a2.aic, 0, a2.cube_tflops["float16"], a2)
    streamed = cube_us(gemm, tiling._replace(resident_a=False), a2.aic, 0, a2.cube_tflops["float16"], a2)
    assert resident < streamed


def _slice_k_us(gemm: Gemm) -> float:
    a2 = load_profile("910b2")
    return cube_us(gemm, single_core_split_k(gemm, a2), a2.aic, 0, a2.cube_tflops["float16"], a2)


def test_single_core_split_k_time_grows_across_the_tile_walk_limit():
    """Beyond 32768 output tiles the busiest core is priced without walking every tile; it still loads
    each A block it touches, so the 33rd batch (33792 tiles) adds about what the 32nd (32768) did."""
    times = [_slice_k_us(Gemm(batch, 4096, 8192, 2048, 2, 2)) for batch in (31, 32, 33, 34)]
    assert times == sorted(times)
    assert times[2] - times[1] > 0.9 * (times[1] - times[0])


def test_single_core_split_k_without_edge_tiles_costs_the_same_walked_or_not(monkeypatch):
    """Where every tile is full, counting each core's A blocks band by band gives the walk's time exactly;
    with edge tiles it prices them as full ones, so it never undercuts the walk."""
    from pytest_npufuse.cost import cube

    shapes = [Gemm(32, 4096, 8192, 2048, 2, 2), Gemm(32, 8192, 4096, 2048, 2, 2), Gemm(8, 4000, 16000, 2048, 2, 2)]
    walked = [_slice_k_us(gemm) for gemm in shapes]
    monkeypatch.setattr(cube, "_EXACT_TILES", 0)
    counted = [_slice_k_us(gemm) for gemm in shapes]
    assert counted[:2] == pytest.approx(walked[:2], rel=1e-12)
    assert walked[2] < counted[2] < walked[2] * 1.03


def test_single_core_split_k_holds_b_when_m_exceeds_n_as_the_transposed_product():
    # rows taken as 512-byte aligned: K = 8000 puts the row-major A's rows off them, which costs the held
    # operand in one product and the streamed one in the other
    a2 = replace(load_profile("910b2"), misaligned_read_share=1.0)
    wide, tall = Gemm(1, 2048, 4096, 8000, 2, 2), Gemm(1, 4096, 2048, 8000, 2, 2)
    wide_tiling, tall_tiling = single_core_split_k(wide, a2), single_core_split_k(tall, a2)
    assert (tall_tiling.tile_m, tall_tiling.tile_n, tall_tiling.swizzle[1]) == (128, 256, 0)
    peak = a2.cube_tflops["float16"]
    assert cube_us(tall, tall_tiling, a2.aic, 0, peak, a2) == cube_us(wide, wide_tiling, a2.aic, 0, peak, a2)


def _share_of_peak(gemm: Gemm, tiling: Tiling, profile=B3) -> float:
    """What one matmul reaches of the die's Cube peak, its operands already in L2 (a benchmark loop)."""
    peak = profile.cube_tflops["float16"]
    time = cube_us(gemm, tiling, profile.aic, 0, peak, profile)
    return 2.0 * gemm.batch * gemm.m * gemm.n * gemm.k / (peak * 1e6 * time)


def test_cube_efficiency_rises_with_k_depth():
    """A ping-pong tile loads its first K block before its Cube starts and overlaps only the later ones,
    so its share of the peak grows with the K it walks: 20 tiles on 20 cores, K from one block to 64. With
    the later blocks' loads fully hidden, a deep K approaches the Cube's own pace and never passes it."""
    overlapped = replace(B3, pipeline_overlap=1.0)
    shares = [
        _share_of_peak(Gemm(1, 128 * 20, 256, k, 2, 2), Tiling(128, 256, 1), overlapped) for k in (256, 1024, 4096, 16384)
    ]
    assert shares == sorted(shares) and shares[0] < 0.7 * shares[-1]
    assert 0.95 * B3.cube_tile_efficiency < shares[-1] < B3.cube_tile_efficiency


def test_a_preloading_kernel_pays_its_fill_once_and_a_ping_pong_one_per_tile():
    """With four rounds of tiles, the ping-pong kernel pays four first-block loads, the preloading one
    only the kernel's first: the gap is three fills, whatever the overlap of the later blocks."""
    gemm, tiling = Gemm(1, 128 * 80, 256, 256, 2, 2), Tiling(128, 256, 1)
    loaded = replace(B3, pipeline_overlap=1.0)
    peak = B3.cube_tflops["float16"]
    pingpong = cube_us(gemm, tiling, B3.aic, 0, peak, loaded)
    preload = cube_us(gemm, tiling._replace(preload=True), B3.aic, 0, peak, loaded)
    one_tile = cube_us(Gemm(1, 128 * 20, 256, 256, 2, 2), tiling, B3.aic, 0, peak, loaded)
    assert pingpong > preload
    assert pingpong == pytest.approx(4 * one_tile)


def test_a_gemm_one_element_over_the_tiles_pays_a_tile_more():
    """20 tiles of 128 rows fill the 20 cores of a 910B3; one row more is a 21st tile, padded to a
    16-row fractal, that one core runs after its first: at least a 16-row tile's time more. One element
    more of K is priced as a whole fractal of K."""
    peak = B3.cube_tflops["float16"]
    tiling = Tiling(128, 256, 1, preload=True)

    def time(m: int, k: int) -> float:
        return cube_us(Gemm(1, m, 256, k, 2, 2), tiling, B3.aic, 0, peak, B3)

    edge = cube_tile_us(16, 256, 4096, 2, peak / B3.aic, B3.cube_tile_efficiency, B3)
    assert time(2561, 4096) >= time(2560, 4096) + edge
    assert time(2560, 4097) == time(2560, 4112) > time(2560, 4096)


def test_a_skinny_tile_is_paced_by_feeding_l0b_not_by_its_mmads():
    """MTE1 brings a whole B row into L0B (256 bytes a cycle) for each K step: a 16-row tile's MMADs at
    the peak would take half of that, a 128-row tile's MMADs take longer than its feed."""
    core = B3.cube_tflops["float16"] / B3.aic
    at_peak = lambda rows: 2.0 * rows * 256 * 4096 / (core * 1e6)  # noqa: E731
    assert cube_tile_us(16, 256, 4096, 2, core, 1.0, B3) > 1.9 * at_peak(16)
    assert cube_tile_us(128, 256, 4096, 2, core, 1.0, B3) == pytest.approx(at_peak(128))
    slower_feed = replace(B3, core_l0b_bytes_per_cycle=128)
    assert cube_tile_us(16, 256, 4096, 2, core, 1.0, slower_feed) == pytest.approx(
        2 * cube_tile_us(16, 256, 4096, 2, core, 1.0, B3), rel=0.05
    )


def test_an_nz_weight_streams_faster_than_a_row_major_one():
    """A skinny GEMM streaming its weight from HBM: with B already in NZ the loads run at MTE2's full
    rate (capped by HBM), with B row-major at the per-core DDR rate of ND2NZ's strided bursts (the
    CATLASS tuning guide's 20x6144x16384 pair: 181 against 239 us)."""
    nz, nd = matmul("t::preload_nz", 20, 6144, 16384), matmul("t::preload", 20, 6144, 16384)
    assert body(nz) < 0.8 * body(nd)
    # Never faster than HBM's bandwidth lets the whole weight through.
    weight = 16384 * 6144 * 2
    assert body(nz) >= weight / (B3.hbm_gbps * B3.memory_efficiency * 1e3)



def test_rows_off_512_byte_boundaries_load_slower_on_a2_only():
    """K = 4000 fp16 puts A's rows 8000 bytes apart, off the 512-byte boundaries MTE2 reads best from
    (Ascend C best practices: up to 30% slower, Atlas A2 only); K = 4096 does not."""
    b2, c = load_profile("910b2"), load_profile("910c")
    assert b2.misaligned_read_share < 1.0 == c.misaligned_read_share
    tiles, peak = Tiling(128, 256, 1), b2.cube_tflops["float16"]

    def per_k(k, profile):
        gemm = Gemm(1, 2048, 4096, k, 2, 2)
        return cube_us(gemm, tiles, profile.aic, (2048 + 4096) * k * 2, peak, profile) / k

    assert per_k(4000, b2) > 1.05 * per_k(4096, b2)
    assert per_k(4000, c) == pytest.approx(per_k(4096, c), rel=0.03)
    # an NZ operand is contiguous whatever its row length
    nz = Tiling(128, 256, 1, nz_a=True)
    aligned = cube_us(Gemm(1, 2048, 4096, 4000, 2, 2), nz, 24, 1e8, peak, b2)
    assert aligned == cube_us(Gemm(1, 2048, 4096, 4000, 2, 2), nz, 24, 1e8, peak, replace(b2, misaligned_read_share=1.0))


def test_rows_past_nd2nz_stride_limit_pay_one_copy_each():
    """A row-major A whose rows are 65536 elements apart or more is copied row by row (CATLASS
    CopyGmToL1 past STRIDE_LIMIT): each copy pays row_copy_cycles, shorter rows pay nothing, nor does an
    NZ A; the single-core split-K pays it on the A blocks it holds."""
    b2 = replace(load_profile("910b2"), core_row_copy_cycles=200.0)
    free = replace(b2, core_row_copy_cycles=0.0)
    peak = b2.cube_tflops["float16"]

    def per_k(k, tiling, profile):
        gemm = Gemm(1, 2048, 4096, k, 2, 2)
        return cube_us(gemm, tiling, profile.aic, (2048 + 4096) * k * 2, peak, profile) / k

    tiles = Tiling(128, 256, 1)
    assert per_k(65536, tiles, b2) > 2 * per_k(65536, tiles, free)
    assert per_k(65280, tiles, b2) == per_k(65280, tiles, free)
    nz = Tiling(128, 256, 1, nz_a=True)
    assert per_k(65536, nz, b2) == per_k(65536, nz, free)
    slice_k = single_core_split_k(Gemm(1, 2048, 4096, 80000, 2, 2), b2)
    assert per_k(80000, slice_k, b2) > 1.5 * per_k(80000, slice_k, free)


def test_a_batched_decode_matmul_reads_each_batch_s_weights_once():
    """``[b, 1, k] x [b, k, n]``: a wave's tile rows belong to different batches, which share no B panel, so
    nothing is read again however far the operands overflow L2; a batch with many tile rows still re-reads its B."""
    decode = Gemm(32, 1, 1000, 4096, 2, 2)
    tiling = Tiling(128, 256, 1)
    unique = 32 * (4096 * 1000 + 4096 + 1000) * 2
    assert hbm_traffic(decode, tiling, 24, unique, 192 * 2**20) == unique
    prefill = Gemm(32, 4096, 1000, 4096, 2, 2)
    assert hbm_traffic(prefill, tiling, 24, unique, 192 * 2**20) > unique
