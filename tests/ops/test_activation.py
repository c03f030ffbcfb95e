"""torch_npu's activation ops against their documented formulas, eager and compiled."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError


def _reference_gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """GELU in float64 from its definition: x * Phi(x), or the tanh form."""
    v = x.to(torch.float64)
    if approximate == "tanh":
        return 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_npu_gelu_is_gelu_of_the_chosen_form_rounded_once(dtype, approximate):
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    y = torch_npu.npu_gelu(x, approximate=approximate)
    assert y.dtype == dtype and y.shape == x.shape
    expected = _reference_gelu(x, approximate)
    tolerance = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}[dtype]
    assert torch.allclose(y.to(torch.float64), expected, rtol=tolerance, atol=tolerance)


def test_fast_gelu_is_x_times_sigmoid_of_1_702_x_under_both_names():
    x = torch.linspace(-6, 6, 97, dtype=torch.float32)
    expected = x.to(torch.float64) / (1 + torch.exp(-1.702 * x.to(torch.float64).abs())) * torch.exp(
        0.851 * (x.to(torch.float64) - x.to(torch.float64).abs())
    )
    for op in (torch_npu.npu_fast_gelu, torch_npu.fast_gelu):
        assert torch.allclose(op(x).to(torch.float64), expected, rtol=1e-6, atol=1e-7)


def test_activations_compile_to_one_node_each_and_check_their_arguments():
    def f(x):
        return torch_npu.npu_gelu(torch_npu.npu_fast_gelu(x), approximate="tanh")

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    x = torch.randn(4, 8, dtype=torch.bfloat16)
    assert torch.equal(torch.compile(f, backend=backend, fullgraph=True)(x), f(x))
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert targets == ["npu.npu_fast_gelu", "npu.npu_gelu"]
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_gelu(x, approximate="exact")
    assert (exc.value.op, exc.value.argument) == ("npu_gelu", "approximate")
    with pytest.raises(ValueError) as exc:
        torch_npu.npu_fast_gelu(torch.ones(2, dtype=torch.int64))
    assert (exc.value.op, exc.value.argument) == ("npu_fast_gelu", "input")


def _float64(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_silu_and_mish_follow_their_definitions_rounded_once(dtype):
    x = torch.linspace(-8, 8, 161).reshape(7, 23).to(dtype)
    v = _float64(x)
    tolerance = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}[dtype]
    silu = v / (1 + torch.exp(-v))
    mish = v * torch.tanh(torch.log1p(torch.exp(v)))
    for op, expected in ((torch_npu.npu_silu, silu), (torch_npu.npu_mish, mish)):
        y = op(x)
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(_float64(y), expected, rtol=tolerance, atol=tolerance)


def test_silu_in_place_overwrites_and_returns_its_argument():
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1))
    expected = torch_npu.npu_silu(x)
    result = torch_npu.npu_silu_(x)
    assert result is x and torch.equal(x, expected)


@pytest.mark.parametrize("op, torch_op", [("npu_silu", torch.nn.functional.silu), ("npu_mish", torch.nn.functional.mish)])
def test_silu_and_mish_gradients_are_their_derivatives_through_the_backward_ops(op, torch_op):
    x = torch.randn(4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(torch.float32)
    x.requires_grad_(True)
    weights = torch.randn(4, 9, generator=torch.Generator().manual_seed(3))
    (getattr(torch_npu, op)(x) * weights).sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    (torch_op(reference) * weights).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_mul_is_gelu_of_the_first_half_times_the_second(approximate):
    x = torch.randn(3, 4, 32, generator=torch.Generator().manual_seed(4))
    y = torch_npu.npu_gelu_mul(x, approximate=approximate)
    expected = _reference_gelu(x[..., :16], approximate) * _float64(x[..., 16:])
    assert y.shape == (3, 4, 16)
    torch.testing.assert_close(_float64(y), expected, rtol=1e-6, atol=1e-6)


def test_gelu_mul_refuses_an_unknown_approximation_and_an_odd_width():
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_gelu_mul(torch.zeros(2, 4), approximate="erf")
    assert (exc.value.op, exc.value.argument) == ("npu_gelu_mul", "approximate")
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_gelu_mul(torch.zeros(2, 5))
    assert exc.value.argument == "input"


def _reference_clipped_swiglu(x, dim, alpha, limit, bias, interleaved, rows=None):
    """The doc's steps: fold to [pre, cut, after], split cut (even/odd or halves), clamp, gate."""
    dim = dim % x.dim()
    folded = _float64(x).reshape(math.prod(x.shape[:dim]), x.shape[dim], -1)
    half = x.shape[dim] // 2
    a, b = (folded[:, 0::2], folded[:, 1::2]) if interleaved else (folded[:, :half], folded[:, half:])
    a, b = a.clamp(max=limit), b.clamp(-limit, limit)
    y = a * torch.sigmoid(alpha * a) * (b + bias)
    if rows is not None:
        y[rows:] = 0
    shape = list(x.shape)
    shape[dim] = half
    return y.reshape(shape)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("dim", [-1, 1])
def test_clipped_swiglu_follows_the_documented_steps(interleaved, dim):
    x = 6 * torch.randn(4, 6, 10, generator=torch.Generator().manual_seed(5))
    y = torch_npu.npu_clipped_swiglu(x, dim=dim, alpha=1.5, limit=5.0, bias=0.5, interleaved=interleaved)
    expected = _reference_clipped_swiglu(x, dim, 1.5, 5.0, 0.5, interleaved)
    assert y.shape == expected.shape and y.dtype == x.dtype
    torch.testing.assert_close(_float64(y), expected, rtol=1e-6, atol=1e-6)


def test_clipped_swiglu_computes_only_the_grouped_rows():
    x = 6 * torch.randn(10, 8, generator=torch.Generator().manual_seed(6))
    groups = torch.tensor([3, 4], dtype=torch.int64)
    y = torch_npu.npu_clipped_swiglu(x, group_index=groups)
    torch.testing.assert_close(_float64(y), _reference_clipped_swiglu(x, -1, 1.702, 7.0, 1.0, True, rows=7))


def test_clipped_swiglu_refuses_int32_group_counts():
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_clipped_swiglu(torch.zeros(4, 8), group_index=torch.tensor([4], dtype=torch.int32))
    assert (exc.value.op, exc.value.argument) == ("npu_clipped_swiglu", "group_index")


def test_the_new_activation_ops_pass_opcheck():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(7))
    cases = [
        (torch.ops.npu.npu_silu.default, (x,), {}),
        (torch.ops.npu.npu_silu_backward.default, (x, x, torch.nn.functional.silu(x)), {}),
        (torch.ops.npu.npu_mish.default, (x,), {}),
        (torch.ops.npu.npu_mish_backward.default, (x, x), {}),
        (torch.ops.npu.npu_gelu_mul.default, (x,), {"approximate": "tanh"}),
        (torch.ops.npu.npu_clipped_swiglu.default, (x,), {"group_index": torch.tensor([2, 1])}),
    ]
    for op, args, kwargs in cases:
        torch.library.opcheck(op, args, kwargs)


@pytest.mark.parametrize("activate_left", [False, True])
@pytest.mark.parametrize("approximate", [0, 1])
def test_geglu_gates_one_half_with_gelu_and_differentiates_through_its_grad_op(approximate, activate_left):
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(8), requires_grad=True)
    out, gelu = torch_npu.npu_geglu(x, dim=-1, approximate=approximate, activate_left=activate_left)
    first, second = x.detach().chunk(2, dim=-1)
    gate, other = (first, second) if activate_left else (second, first)
    form = "tanh" if approximate else "none"
    torch.testing.assert_close(_float64(gelu), _reference_gelu(gate, form), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(_float64(out), _reference_gelu(gate, form) * _float64(other), rtol=1e-6, atol=1e-6)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    (out * weights).sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    ref_first, ref_second = reference.chunk(2, dim=-1)
    ref_gate, ref_other = (ref_first, ref_second) if activate_left else (ref_second, ref_first)
    (torch.nn.functional.gelu(ref_gate, approximate=form) * ref_other * weights).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-5, atol=1e-6)


def test_geglu_refuses_an_unknown_approximation_and_passes_opcheck():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(10))
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_geglu(x, approximate=2)
    assert (exc.value.op, exc.value.argument) == ("npu_geglu", "approximate")
    torch.library.opcheck(torch.ops.npu.npu_geglu.default, (x, 0, 0, True))
    out, gelu = torch_npu.npu_geglu(x)
    torch.library.opcheck(torch.ops.npu.npu_geglu_grad.default, (out, x, gelu))


def test_fast_gelu_takes_its_tensor_as_input_keyword() -> None:
    """torch_npu registers its custom ops with ``self`` renamed ``input`` (torchnpugen/custom_functions.py),
    so ``torch_npu.fast_gelu(input=x)`` is a valid call."""
    x = torch.randn(3, 16, 32)
    assert torch.equal(torch_npu.fast_gelu(input=x), torch_npu.fast_gelu(x))
    assert torch.equal(torch_npu.npu_fast_gelu(input=x), torch_npu.npu_fast_gelu(x))
