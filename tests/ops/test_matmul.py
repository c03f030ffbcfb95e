"""Matmul-family ops (npu_mm_all_reduce_base, npu_transpose_batchmatmul) against float64 formulas, and the
MatmulAllReduce cost: the all-reduce of its output is priced on the link for the profile's world."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from pytest_npufuse import cost, torch_npu
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(5)


def _rounded(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The float64 reference rounded once to the output dtype: what fp32 accumulation must match closely."""
    return reference.to(dtype)


def test_mm_all_reduce_is_the_one_rank_product_with_bias_and_x3() -> None:
    gen = _gen()
    x1 = torch.randn(2, 3, 64, generator=gen).to(torch.bfloat16)
    x2 = torch.randn(16, 64, generator=gen).to(torch.bfloat16).t()  # a transposed [k, n] view, as callers pass
    bias = torch.randn(16, generator=gen).to(torch.bfloat16)
    x3 = torch.randn(2, 3, 16, generator=gen).to(torch.bfloat16)
    out = torch_npu.npu_mm_all_reduce_base(x1, x2, "hcom_tp", reduce_op="sum", bias=bias, x3=x3)
    reference = x1.double() @ x2.double() + bias.double() + x3.double()
    assert out.shape == (2, 3, 16) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _rounded(reference, torch.bfloat16).double(), rtol=8e-3, atol=1e-2)


def test_mm_all_reduce_dequantises_an_int8_weight_per_group() -> None:
    gen = _gen()
    k, n, group = 64, 8, 32
    x1 = torch.randn(4, k, generator=gen).to(torch.float16)
    x2 = torch.randint(-8, 8, (k, n), generator=gen, dtype=torch.int8)
    scale = (torch.rand(k // group, n, generator=gen) / 8).to(torch.float16)
    offset = torch.randint(-2, 2, (k // group, n), generator=gen).to(torch.float16)
    out = torch_npu.npu_mm_all_reduce_base(x1, x2, "hcom", antiquant_scale=scale, antiquant_offset=offset,
                                           antiquant_group_size=group)
    weight = ((x2.double() + offset.double().repeat_interleave(group, 0)) * scale.double().repeat_interleave(group, 0))
    reference = x1.double() @ weight.to(torch.float16).double()
    torch.testing.assert_close(out.double(), reference.to(torch.float16).double(), rtol=2e-3, atol=2e-3)


def test_mm_all_reduce_refuses_full_quantisation_and_other_reduce_ops() -> None:
    x = torch.zeros(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mm_all_reduce_base(x, x.t(), "h", dequant_scale=torch.ones(8))
    assert (exc.value.op, exc.value.argument) == ("npu_mm_all_reduce_base", "dequant_scale")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mm_all_reduce_base(x, x.t(), "h", reduce_op="max")
    assert (exc.value.op, exc.value.argument) == ("npu_mm_all_reduce_base", "reduce_op")
    with pytest.raises(TypeError) as exc:
        torch_npu.npu_mm_all_reduce_base(x, x.t(), 0)
    assert (exc.value.op, exc.value.argument) == ("npu_mm_all_reduce_base", "hcom")


def test_fake_tensors_get_op_plugins_shapes_for_unmodeled_quantised_modes() -> None:
    """On fake tensors the fully quantised npu_mm_all_reduce_base, a hifloat8 npu_weight_quant_batchmatmul
    weight and npu_quant_matmul's float8 x1 get op-plugin's meta shapes and dtypes (a traced graph needs
    them); real tensors are refused."""
    with FakeTensorMode():
        x1, x2 = torch.empty(8, 16, dtype=torch.int8), torch.empty(16, 4, dtype=torch.int8)
        for dequant, dtype in ((torch.empty(4, dtype=torch.bfloat16), torch.bfloat16),
                               (torch.empty(4, dtype=torch.int64), torch.float16)):
            out = torch_npu.npu_mm_all_reduce_base(x1, x2, "hcom", dequant_scale=dequant)
            assert (tuple(out.shape), out.dtype) == ((8, 4), dtype)
        x, scale = torch.empty(2, 16, dtype=torch.float16), torch.empty(1, 4, dtype=torch.float16)
        out = torch_npu.npu_weight_quant_batchmatmul(x, x2, scale, weight_dtype=torch_npu.hifloat8)
        assert (tuple(out.shape), out.dtype) == ((2, 4), torch.float16)
        fp8, fp4_words = torch.empty(1, 64, dtype=torch.float8_e4m3fn), torch.empty(64, 16)
        out = torch_npu.npu_quant_matmul(fp8, fp4_words, torch.empty(2, 128, dtype=torch.uint8), group_sizes=[0, 0, 32],
                                         y_scale=torch.empty(1, 128, dtype=torch.int64), output_dtype=torch.bfloat16)
        assert (tuple(out.shape), out.dtype) == ((1, 128), torch.bfloat16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_quant_matmul(torch.zeros(2, 8, dtype=torch.int8), torch.zeros(8, 4, dtype=torch.int8),
                                   torch.ones(4), y_scale=torch.ones(1, 4, dtype=torch.int64), output_dtype=torch.bfloat16)
    assert (exc.value.op, exc.value.argument) == ("npu_quant_matmul", "y_scale")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_mm_all_reduce_base(torch.zeros(8, 16, dtype=torch.int8), torch.zeros(16, 4, dtype=torch.int8),
                                         "hcom", dequant_scale=torch.ones(4, dtype=torch.bfloat16))
    assert (exc.value.op, exc.value.argument) == ("npu_mm_all_reduce_base", "dequant_scale")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_weight_quant_batchmatmul(torch.zeros(2, 16, dtype=torch.float16),
                                               torch.zeros(16, 4, dtype=torch.int8),
                                               torch.ones(1, 4, dtype=torch.float16), weight_dtype=torch_npu.hifloat8)
    assert (exc.value.op, exc.value.argument) == ("npu_weight_quant_batchmatmul", "weight_dtype")


def _mm_all_reduce_kernel(m: int, k: int, n: int):
    builder = ProgramBuilder()
    x, w = builder.input("x", (m, k), "bfloat16"), builder.input("w", (k, n), "bfloat16")
    out = builder.op("npu::npu_mm_all_reduce_base", [x, w], (m, n), "bfloat16")
    return next(kernel for kernel in builder.kernels if kernel.node == out)


def test_mm_all_reduce_costs_the_longer_of_matmul_and_the_ring_all_reduce_of_its_world() -> None:
    kernel = _mm_all_reduce_kernel(4096, 1024, 7168)
    dim = cost.block_dim(kernel, A3)
    alone = cost.body_us(kernel, dim, dataclasses.replace(A3, comm_ranks=1))
    assert alone == pytest.approx(cost.rules.matmul_us(kernel, dim, A3))
    eight, sixteen = (cost.body_us(kernel, dim, dataclasses.replace(A3, comm_ranks=r)) for r in (8, 16))
    message = 4096 * 7168 * 2
    link = A3.comm_gbps * A3.comm_efficiency * 1e3
    assert sixteen > eight > alone
    assert sixteen == pytest.approx(2 * 15 * A3.comm_latency_us + 2 * message * 15 / 16 / link)


def test_transpose_batchmatmul_permutes_input_weight_and_output() -> None:
    gen = _gen()
    heads, tokens, k, n = 4, 3, 32, 16
    x = torch.randn(tokens, heads, k, generator=gen).to(torch.bfloat16)  # [M, B, K]
    w = torch.randn(heads, n, k, generator=gen).to(torch.bfloat16)  # [B, N, K]
    out = torch_npu.npu_transpose_batchmatmul(x, w, bias=None, scale=None, perm_x1=(1, 0, 2), perm_x2=(0, 2, 1),
                                              perm_y=(1, 0, 2))
    reference = (x.double().transpose(0, 1) @ w.double().transpose(1, 2)).transpose(0, 1)
    assert out.shape == (tokens, heads, n)
    torch.testing.assert_close(out.double(), reference.to(torch.bfloat16).double(), rtol=8e-3, atol=1e-2)
    default = torch_npu.npu_transpose_batchmatmul(x.transpose(0, 1), w.transpose(1, 2))
    assert torch.equal(default, out)


def test_transpose_batchmatmul_refuses_undocumented_permutations_and_scale() -> None:
    x = torch.zeros(2, 3, 16, dtype=torch.float16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_transpose_batchmatmul(x, x.transpose(1, 2), perm_y=(0, 1, 2))
    assert (exc.value.op, exc.value.argument) == ("npu_transpose_batchmatmul", "perm_y")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_transpose_batchmatmul(x, x.transpose(1, 2), scale=torch.ones(2, dtype=torch.int64))
    assert (exc.value.op, exc.value.argument) == ("npu_transpose_batchmatmul", "scale")


def test_matmul_add_fp32_accumulates_x_transposed_times_weight_into_c_in_place() -> None:
    gen = _gen()
    x = torch.randn(32, 8, generator=gen).to(torch.float16)  # [K, M]
    weight = torch.randn(32, 12, generator=gen).to(torch.float16)  # [K, N]
    c = torch.randn(8, 12, generator=gen)
    expected = c.double() + x.double().t() @ weight.double()
    assert torch_npu._npu_matmul_add_fp32(x, weight, c) is None
    torch.testing.assert_close(c.double(), expected, rtol=1e-5, atol=1e-5)


def test_matmul_add_fp32_refuses_a_half_accumulator() -> None:
    x = torch.zeros(4, 2, dtype=torch.float16)
    with pytest.raises(ValueError) as exc:
        torch_npu._npu_matmul_add_fp32(x, x, torch.zeros(2, 2, dtype=torch.float16))
    assert (exc.value.op, exc.value.argument) == ("_npu_matmul_add_fp32", "C")


def test_matmul_add_fp32_passes_opcheck_and_is_costed_with_its_contraction_dim() -> None:
    x, weight = torch.randn(16, 4).to(torch.bfloat16), torch.randn(16, 6).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.npu._npu_matmul_add_fp32.default, (x, weight, torch.zeros(4, 6)))
    builder = ProgramBuilder()
    inputs = [builder.input("x", (4096, 512), "bfloat16"), builder.input("w", (4096, 256), "bfloat16"),
              builder.input("c", (512, 256), "float32")]
    out = builder.op("npu::_npu_matmul_add_fp32", inputs, (512, 256), "float32")
    kernel = next(kernel for kernel in builder.kernels if kernel.node == out)
    assert kernel.flops == 2 * 512 * 256 * 4096  # K is x's first dim (x is transposed), not M


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_is_input_times_weight_transposed_plus_bias_and_differentiable(with_bias: bool) -> None:
    gen = _gen()
    x = torch.randn(6, 32, generator=gen, requires_grad=True)
    weight = torch.randn(10, 32, generator=gen, requires_grad=True)
    bias = torch.randn(10, generator=gen, requires_grad=True) if with_bias else None
    y = torch_npu.npu_linear(x, weight, bias)
    reference = [t.detach().clone().requires_grad_(True) for t in (x, weight, *([bias] if with_bias else []))]
    expected = torch.nn.functional.linear(*reference)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    grads = torch.randn(6, 10, generator=gen)
    (y * grads).sum().backward()
    (expected * grads).sum().backward()
    for mine, theirs in zip((x, weight, *([bias] if with_bias else [])), reference):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-5, atol=1e-5)


def test_linear_refuses_int8_and_passes_opcheck() -> None:
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_linear(torch.zeros(2, 4, dtype=torch.int8), torch.zeros(3, 4, dtype=torch.int8))
    assert (exc.value.op, exc.value.argument) == ("npu_linear", "input")
    x, weight = torch.randn(3, 8), torch.randn(5, 8)
    torch.library.opcheck(torch.ops.npu.npu_linear.default, (x, weight, torch.randn(5)))
    torch.library.opcheck(torch.ops.npu.npu_linear_backward.default, (torch.randn(3, 5), x, weight))


def test_all_gather_base_mm_multiplies_the_gathered_input_rank_zero_first() -> None:
    """One process is rank 0 of the world: its rows come first, the ranks not simulated give zero rows."""
    gen = _gen()
    x1, x2 = torch.randn(4, 64, generator=gen).bfloat16(), torch.randn(64, 16, generator=gen).bfloat16()
    bias = torch.randn(16, generator=gen).bfloat16()
    out, gathered = torch_npu.npu_all_gather_base_mm(x1, x2, "hcom_tp", 2, bias=bias)
    assert out.shape == (8, 16) and gathered.shape == (8, 64) and out.dtype == torch.bfloat16
    assert torch.equal(gathered[:4], x1) and not gathered[4:].any()
    expected = gathered.double() @ x2.double() + bias.double()
    torch.testing.assert_close(out.double(), _rounded(expected, torch.bfloat16).double(), rtol=1e-2, atol=1e-2)
    plain, empty = torch_npu.npu_all_gather_base_mm(x1, x2, "hcom_tp", 1, gather_output=False)
    assert empty.shape == (0,) and plain.shape == (4, 16)


def test_all_gather_base_mm_refuses_quantisation_and_other_gather_targets() -> None:
    x = torch.zeros(2, 8, dtype=torch.float16)
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_all_gather_base_mm(x, x.t(), "hcom", 2, gather_index=1)
    assert (exc.value.op, exc.value.argument) == ("npu_all_gather_base_mm", "gather_index")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_all_gather_base_mm(x, x.t(), "hcom", 2, x2_scale=torch.ones(1, 2))
    assert (exc.value.op, exc.value.argument) == ("npu_all_gather_base_mm", "x2_scale")


def test_all_gather_base_mm_costs_the_longer_of_the_gathered_matmul_and_the_ring_all_gather() -> None:
    builder = ProgramBuilder()
    x, w = builder.input("x", (512, 7168), "bfloat16"), builder.input("w", (7168, 2048), "bfloat16")
    out = builder.op("npu::npu_all_gather_base_mm", [x, w], (512 * 8, 2048), "bfloat16")
    kernel = next(kernel for kernel in builder.kernels if kernel.node == out)
    dim = cost.block_dim(kernel, A3)
    profile = dataclasses.replace(A3, comm_ranks=8)
    gathered = 512 * 8 * 7168 * 2  # the whole gathered input crosses the ring once
    ring = 7 * A3.comm_latency_us + gathered * 7 / 8 / (A3.comm_gbps * A3.comm_efficiency * 1e3)
    assert cost.body_us(kernel, dim, profile) == pytest.approx(max(cost.rules.matmul_us(kernel, dim, profile), ring))
    assert cost.rules.all_gather_input_bytes(kernel.input_specs, kernel.output_specs) == gathered
