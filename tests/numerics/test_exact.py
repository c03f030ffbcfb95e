"""The exact numeric helpers against brute-force references (int64 sums, fp64 sums rounded once)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse.numerics.exact import (
    INT8_K_CHUNK,
    INT32_SAFE_K,
    cube_addmm,
    cube_baddbmm,
    cube_matmul,
    _widen,
    int_matmul,
    wrap_to_int32,
)

GEN_SEED = 7


def _int8(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-128, 128, shape, dtype=torch.int8, generator=gen)


def _int_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int64 matmul, wrapped to int32 by explicit modular arithmetic."""
    exact = torch.matmul(a.to(torch.int64), b.to(torch.int64))
    low = exact % 2**32
    return torch.where(low >= 2**31, low - 2**32, low).to(torch.int32)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((5, 7), (7, 3)),
        ((3, 2500), (2500, 4)),  # k not a multiple of the chunk, three chunks
        ((2, 1, 4, 1030), (3, 1030, 2)),  # batch broadcast
        ((4, 9), (9,)),  # vector right operand
        ((9,), (9, 4)),  # vector left operand
        ((9,), (9,)),  # dot product
        ((2, 0), (0, 3)),  # empty k: zeros
        ((0, 5), (5, 3)),  # no rows
    ],
)
def test_int_matmul_equals_the_int64_reference(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(GEN_SEED)
    a, b = _int8(*a_shape, gen=gen), _int8(*b_shape, gen=gen)
    got = int_matmul(a, b)
    want = _int_reference(a, b)
    assert got.dtype == torch.int32 and got.shape == want.shape
    assert torch.equal(got, want)


def test_int_matmul_is_exact_beyond_the_fp32_integer_range() -> None:
    """All -128: each dot product is k * 2**14, above 2**24 for k > 1024, so one fp32 sum would round."""
    k = 3 * INT8_K_CHUNK + 5
    a = torch.full((2, k), -128, dtype=torch.int8)
    b = torch.full((k, 3), -128, dtype=torch.int8)
    b[-1, 0] = 127  # breaks the power of two, so a rounded fp32 sum could not hit it by luck
    got = int_matmul(a, b)
    assert got[0, 1].item() == k * 2**14
    assert got[0, 0].item() == (k - 1) * 2**14 - 128 * 127


def test_int_matmul_wraps_around_like_an_int32_accumulator() -> None:
    k = INT32_SAFE_K + 4096  # far enough past the int32 range that the true sum overflows
    a = torch.full((k,), -128, dtype=torch.int8)
    b = torch.full((k, 2), -128, dtype=torch.int8)
    b[0, 1] = 1
    got = int_matmul(a, b)
    exact = [k * 2**14, (k - 1) * 2**14 - 128]
    assert all(value > 2**31 - 1 for value in exact)
    assert got.tolist() == [((v + 2**31) % 2**32) - 2**31 for v in exact]


def test_int_matmul_matches_the_exact_int32_product() -> None:
    """Against the product in int64, not against ``torch._int_mm``: on a CPU without AVX512-VNNI/AMX
    (``ATEN_CPU_CAPABILITY=avx2``) torch's int8 kernel returns other values for these inputs."""
    gen = torch.Generator().manual_seed(GEN_SEED)
    a, b = _int8(32, 64, gen=gen), _int8(64, 16, gen=gen)
    assert torch.equal(int_matmul(a, b), (a.to(torch.int64) @ b.to(torch.int64)).to(torch.int32))


def test_wrap_to_int32_reduces_modulo_two_to_the_32() -> None:
    values = torch.tensor([0, 2**31, -(2**31) - 1, 2**32 + 5, -1], dtype=torch.int64)
    assert wrap_to_int32(values).tolist() == [0, -(2**31), 2**31 - 1, 5, -1]


@pytest.mark.parametrize("helper", [int_matmul, cube_matmul])
def test_mixed_or_unsupported_dtypes_are_refused_with_the_fix(helper) -> None:
    with pytest.raises(TypeError) as exc:
        helper(torch.zeros(2, 2, dtype=torch.float16), torch.zeros(2, 2, dtype=torch.bfloat16))
    assert exc.value.op == helper.__name__
    with pytest.raises(TypeError) as exc:
        helper(torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2, dtype=torch.int64))
    assert exc.value.op == helper.__name__


def test_inner_dimension_mismatch_is_named() -> None:
    with pytest.raises(ValueError) as exc:
        int_matmul(torch.zeros(2, 3, dtype=torch.int8), torch.zeros(4, 2, dtype=torch.int8))
    assert exc.value.op == "int_matmul"


def _bf16(values: list[list[float]]) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=torch.bfloat16)
    assert tensor.to(torch.float64).tolist() == values  # each value is exactly a bf16
    return tensor


def test_cube_accumulates_in_fp32_and_rounds_once() -> None:
    """1 + 2**-8 + 2**-8: a bf16 accumulator rounds each half-ulp step to even and stays at 1;
    the Cube's fp32 accumulator holds 1 + 2**-7 exactly, which is a bf16."""
    a = _bf16([[1.0, 2.0**-8, 2.0**-8]])
    b = _bf16([[1.0], [1.0], [1.0]])
    got = cube_matmul(a, b)
    assert got.dtype == torch.bfloat16
    assert got.item() == 1.0 + 2.0**-7
    bf16_accumulator = ((a[0, 0] * b[0, 0] + a[0, 1] * b[1, 0]) + a[0, 2] * b[2, 0]).item()
    assert bf16_accumulator == 1.0  # the semantics the test tells apart


def test_cube_out_dtype_float32_is_the_unrounded_accumulator() -> None:
    a = _bf16([[1.0, 2.0**-20]])
    b = _bf16([[1.0], [1.0]])
    assert cube_matmul(a, b, out_dtype=torch.float32).item() == 1.0 + 2.0**-20
    assert cube_matmul(a, b).item() == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cube_is_the_exact_sum_rounded_once_when_fp32_holds_it_exactly(dtype: torch.dtype) -> None:
    """Integer-valued inputs below 2**8 and k = 250 keep every partial sum an integer below 2**24, so the
    fp32 accumulation is exact and the result must be the fp64 sum rounded once -- bit for bit."""
    gen = torch.Generator().manual_seed(GEN_SEED)
    a = torch.randint(-255, 256, (3, 24, 250), generator=gen).to(dtype)
    b = torch.randint(-255, 256, (3, 250, 40), generator=gen).to(dtype)
    reference = torch.matmul(a.to(torch.float64), b.to(torch.float64))
    assert bool((reference.abs() < 2**24).all())
    got = cube_matmul(a, b)
    assert got.dtype == dtype
    assert torch.equal(got, reference.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cube_stays_within_the_fp32_error_bound_of_the_fp64_reference(dtype: torch.dtype) -> None:
    """Random inputs: the fp32 sum of k products is within k * 2**-24 * sum|a*b| of the exact one (the
    standard bound), so the output lies between the roundings of the interval's two ends."""
    gen = torch.Generator().manual_seed(GEN_SEED)
    k = 300
    a = torch.randn(3, 24, k, generator=gen).to(dtype)
    b = torch.randn(3, k, 40, generator=gen).to(dtype)
    got = cube_matmul(a, b).to(torch.float64)
    reference = torch.matmul(a.to(torch.float64), b.to(torch.float64))
    margin = k * 2.0**-24 * torch.matmul(a.to(torch.float64).abs(), b.to(torch.float64).abs())
    low, high = (reference - margin).to(dtype).to(torch.float64), (reference + margin).to(dtype).to(torch.float64)
    assert bool(((low <= got) & (got <= high)).all())


def test_cube_addmm_adds_the_bias_before_the_one_rounding() -> None:
    """bias 1 plus a product of 2**-8 + 2**-16: rounding the product first gives 2**-8, and 1 + 2**-8 is a
    tie that rounds to 1; one rounding of the fp32 sum is just above the tie and gives 1 + 2**-7."""
    bias = _bf16([[1.0]])
    a = _bf16([[2.0**-8, 2.0**-16]])
    b = _bf16([[1.0], [1.0]])
    assert cube_addmm(bias, a, b).item() == 1.0 + 2.0**-7
    assert (bias + cube_matmul(a, b)).item() == 1.0


def test_cube_addmm_scales_like_torch_addmm() -> None:
    gen = torch.Generator().manual_seed(GEN_SEED)
    bias, a, b = torch.randn(5, generator=gen), torch.randn(4, 6, generator=gen), torch.randn(6, 5, generator=gen)
    got = cube_addmm(bias, a, b, beta=0.5, alpha=2.0)
    assert torch.allclose(got, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), rtol=1e-6, atol=1e-6)
    nan_bias = torch.full((5,), float("nan"))
    assert torch.equal(cube_addmm(nan_bias, a, b, beta=0), cube_matmul(a, b))  # beta=0 ignores self


def test_cube_baddbmm_is_batched_addmm_and_needs_3d() -> None:
    gen = torch.Generator().manual_seed(GEN_SEED)
    bias = torch.randn(2, 3, 4, generator=gen).to(torch.bfloat16)
    a = torch.randn(2, 3, 8, generator=gen).to(torch.bfloat16)
    b = torch.randn(2, 8, 4, generator=gen).to(torch.bfloat16)
    got = cube_baddbmm(bias, a, b)
    for i in range(2):
        assert torch.equal(got[i], cube_addmm(bias[i], a[i], b[i]))
    with pytest.raises(ValueError) as exc:
        cube_baddbmm(bias[0], a[0], b[0])
    assert exc.value.op == "cube_baddbmm"


def test_cube_column_blocks_are_deterministic_and_agree_to_fp32_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Column blocks may change BLAS's summation order (so the last fp32 bit), never the run-to-run bits."""
    gen = torch.Generator().manual_seed(GEN_SEED)
    a = torch.randn(6, 512, generator=gen).to(torch.bfloat16)
    b = torch.randn(512, 96, generator=gen).to(torch.bfloat16)
    whole = cube_matmul(a, b, out_dtype=torch.float32)
    monkeypatch.setattr("pytest_npufuse.numerics.exact.CUBE_BLOCK_BYTES", 4 * 512 * 7)  # 7 columns at a time
    blocked = cube_matmul(a, b, out_dtype=torch.float32)
    assert torch.equal(cube_matmul(a, b, out_dtype=torch.float32), blocked)
    assert torch.allclose(blocked, whole, rtol=1e-5, atol=1e-5)


def test_cube_results_do_not_depend_on_the_thread_count() -> None:
    gen = torch.Generator().manual_seed(GEN_SEED)
    a = torch.randn(2, 4, 2048, generator=gen)
    b = torch.randn(2, 2048, 256, generator=gen)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = cube_matmul(a, b)
    finally:
        torch.set_num_threads(threads)
    assert torch.get_num_threads() == threads
    assert torch.equal(cube_matmul(a, b), single)


def test_blocks_are_widened_into_one_buffer_laid_out_as_to_lays_them_out() -> None:
    """The same values, shape and strides as ``to(float32)`` (so the same BLAS call and bits), in memory
    reused by the next block of that shape; an fp32 block goes to BLAS as it is, as ``to`` leaves it."""
    weight = torch.randn(64, 24).to(torch.bfloat16)
    quantised = torch.randint(-127, 128, (24, 64), dtype=torch.int8)
    for first, second in ((weight.t()[:, :8], weight.t()[:, 8:16]),  # dense: a transposed weight's rows
                          (quantised[:16, :8], quantised[8:24, 8:16]),  # strided: columns of a row-major tile
                          (quantised.reshape(2, 12, 64)[:, :, :8], quantised.reshape(2, 12, 64)[:, :, 8:16])):
        spare = {}
        widened = _widen(first, spare)
        reference = first.to(torch.float32)
        assert torch.equal(widened, reference) and widened.stride() == reference.stride()
        again = _widen(second, spare)
        assert torch.equal(again, second.to(torch.float32)) and again.data_ptr() == widened.data_ptr()
    block = torch.randn(16, 64)[:, :8]
    assert _widen(block, {}) is block
