"""Shape-dependent Cube time (issue 21): tiles over cores, K depth, pipeline fill and the memory path."""

from dataclasses import replace

from pytest_npufuse import cost
from pytest_npufuse.cost.cube import Gemm, Tiling, cube_us, hbm_traffic
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
        "t::split_k": {
            "engine": "cube",
            "fusable": False,
            "sync_all": False,
            "block_dim": "auto",
            "cost": "matmul_split_k",
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
