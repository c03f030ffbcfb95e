"""Eager matmuls under the shim compute as the modeled Cube does, so an eager result and a compiled
one agree bit for bit, as on a device (TorchAir's aclgraph smoke tests compare them with allclose)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torchair
from pytest_npufuse.numerics.exact import cube_addmm, cube_matmul


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_eager_low_precision_matmuls_are_the_cubes_and_match_the_compiled_graph(shim, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(8, 4, 511, dtype=dtype), torch.randn(8, 511, 128, dtype=dtype)
    assert torch.equal(torch.matmul(a, b), cube_matmul(a, b))
    assert torch.equal(a[0] @ b[0], cube_matmul(a[0], b[0]))
    bias = torch.randn(128, dtype=dtype)
    assert torch.equal(torch.addmm(bias, a[0], b[0]), cube_addmm(bias, a[0], b[0]))

    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"
    compiled = torch.compile(lambda x, y: torch.matmul(x, y).transpose(1, 0), backend=torchair.get_npu_backend(compiler_config=config))
    assert torch.equal(compiled(a, b), torch.matmul(a, b).transpose(1, 0))


def test_other_dtypes_keep_torchs_kernels(shim):
    a, b = torch.randn(16, 33, dtype=torch.float64), torch.randn(33, 7, dtype=torch.float64)
    assert torch.equal(a @ b, torch.mm(a, b, out=torch.empty(0, dtype=torch.float64)))
    ints = torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (4, 2))
    assert torch.equal(torch.mm(*ints), (ints[0].double() @ ints[1].double()).long())
    with pytest.raises(RuntimeError):  # torch's own refusal of a mixed-dtype product stays
        torch.mm(torch.randn(2, 2, dtype=torch.float16), torch.randn(2, 2))


def test_an_object_assigned_to_torch_npu_reads_the_names_it_lacks_from_the_shim(shim):
    class StubNpu:  # TorchAir's aclgraph tests assign an instance of theirs in setUp
        def __init__(self):
            self.Stream = "the test's own"

    shim_npu = torch.npu
    try:
        torch.npu = StubNpu()
        # Dynamo asks torch.npu.is_available() (through torch.accelerator) before each compile
        assert torch.npu.Stream == "the test's own" and torch.npu.is_available() is True
    finally:
        torch.npu = shim_npu
