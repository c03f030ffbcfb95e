"""Sparse decode attention (issue 21): rows gathered through an index, split by the dims that exist."""

from dataclasses import replace

from pytest_npufuse import cost
from pytest_npufuse.cost.attention import gather_us
from pytest_npufuse.ir.program import TensorSpec
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("910c")
CATALOG = load_catalog(
    {
        "t::sparse": {
            "engine": "cube", "fusable": False, "sync_all": False, "block_dim": "auto", "cost": "sparse_attention",
            "flops_per_element": 5,
        },
    }
)


def sparse(batch=1, tokens=1, heads=128, kv_heads=1, top_k=2048, cached=2560, dim=512, rope=64):
    """A DeepSeek-style sparse MLA decode attention kernel and its profile-independent inputs."""
    builder = ProgramBuilder(CATALOG)
    inputs = [
        builder.input("q", (batch, tokens, heads, dim), "bfloat16"),
        builder.input("q_rope", (batch, tokens, heads, rope), "bfloat16"),
        builder.input("k", (cached, kv_heads, dim), "bfloat16"),
        builder.input("k_rope", (cached, kv_heads, rope), "bfloat16"),
        builder.input("idx", (batch, tokens, kv_heads, top_k), "int32"),
    ]
    out = builder.op("t::sparse", inputs, (batch, tokens, heads, dim), "bfloat16")
    return next(kernel for kernel in builder.kernels if kernel.node == out)


def body(kernel, profile=A3):
    return cost.body_us(kernel, cost.block_dim(kernel, profile), profile)


def test_the_work_splits_over_batch_tokens_and_kv_heads_not_query_heads():
    assert cost.block_dim(sparse(), A3) == 1
    assert cost.block_dim(sparse(batch=4, tokens=2), A3) == 8
    assert cost.block_dim(sparse(batch=64), A3) == A3.aic
    # eight units on eight cores take as long as one; 48 units on 24 cores twice as long
    assert body(sparse(batch=8)) == body(sparse())
    assert body(sparse(batch=48)) == 2 * body(sparse())


def test_it_reads_the_selected_rows_not_the_caches():
    short, long = sparse(cached=2560), sparse(cached=48000)
    assert short.bytes == long.bytes
    row = (512 + 64) * 2
    assert short.bytes >= 2048 * row
    assert body(short) == body(long)


def test_gathered_rows_cost_more_a_byte_than_a_contiguous_copy():
    """The same bytes as a stream of the whole block on one core, and as 1152-byte rows fetched one by
    one: every row pays its accesses on top of its bytes."""
    caches = (TensorSpec((2560, 1, 512), "bfloat16", 2560 * 1024), TensorSpec((2560, 1, 64), "bfloat16", 2560 * 128))
    rows = 2048
    gathered = gather_us(rows, caches, A3)
    vectors = A3.aiv // A3.aic
    contiguous = rows * (512 + 64) * 2 / (A3.core_ddr_bytes_per_cycle * vectors * A3.vector_mhz)
    assert gathered > 1.5 * contiguous
    free_access = replace(A3, core_indexed_access_cycles=0.0)
    assert gather_us(rows, caches, free_access) == contiguous


def test_a_decode_step_of_one_sequence_is_bound_by_its_gather_not_by_hbm():
    kernel = sparse()
    streamed = kernel.bytes / (A3.hbm_gbps * A3.memory_efficiency * 1e3)
    assert body(kernel) > 10 * streamed
    slower = replace(A3, core_indexed_access_cycles=2 * A3.core_indexed_access_cycles)
    assert body(kernel, slower) > body(kernel)


def test_the_cube_and_softmax_overlap_the_gather():
    """The three parts pipeline: the body is at least the longest and less than their sum."""
    kernel = sparse()
    overlapped, serial = replace(A3, pipeline_overlap=1.0), replace(A3, pipeline_overlap=0.0)
    assert body(kernel, overlapped) < body(kernel) < body(kernel, serial)
    assert body(kernel, overlapped) >= gather_us(2048, kernel.input_specs[2:4], A3)
