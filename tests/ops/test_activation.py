"""torch_npu's activation ops against their documented formulas, eager and compiled."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npufuse import torch_npu


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
    with pytest.raises(ValueError, match="approximate=exact"):
        torch_npu.npu_gelu(x, approximate="exact")
    with pytest.raises(ValueError, match="int64"):
        torch_npu.npu_fast_gelu(torch.ones(2, dtype=torch.int64))
