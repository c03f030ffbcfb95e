"""How SuperKernel scopes resolve and break (TorchAir's SuperKernel feature document and option table).

Each case states, through its marker, what a real Atlas A3 compilation would do with the scope.
"""

from pathlib import Path

import pytest
import torch
import torch.distributed._functional_collectives as fc

from pytest_npufuse import torchair
from pytest_npufuse.errors import ScopeIgnoredWarning

TOKENS, HIDDEN, INTER = 128, 1024, 2048


def weights(*shapes):
    gen = torch.Generator().manual_seed(7)
    return [torch.randn(*shape, generator=gen) / shape[0] ** 0.5 for shape in shapes]


def hidden():
    return torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(3))


class TwoMatmuls(torch.nn.Module):
    """Two dependent projections, all fusable, in one scope."""

    def __init__(self, options=""):
        super().__init__()
        self.options = options
        a, b = weights((HIDDEN, INTER), (INTER, HIDDEN))
        self.a, self.b = torch.nn.Parameter(a), torch.nn.Parameter(b)

    def forward(self, x):
        with torchair.scope.super_kernel("proj", self.options):
            return (x @ self.a) @ self.b


class BrokenByAdd(TwoMatmuls):
    """vllm-ascend #2157: an Add inside the scope splits the SuperKernel in two."""

    def forward(self, x):
        with torchair.scope.super_kernel("proj", self.options):
            y = (x @ self.a) + 1.0
            return y @ self.b


@pytest.mark.superkernel(scope="proj", segments=1, breaks=[], min_speedup=1.01)
def test_two_projections_fuse_into_one_superkernel(npufuse):
    report = npufuse.check(TwoMatmuls(), hidden())
    assert report.superkernels["proj"].names == ("sk_proj_start_MatMulV3_end_MatMulV3_1",)


@pytest.mark.superkernel(scope="proj", segments=2, breaks=["aten::add"])
def test_add_inside_the_scope_splits_it(npufuse):
    npufuse.check(BrokenByAdd(), hidden())


@pytest.mark.superkernel(scope="proj", outcome="bypassed", breaks=["aten::add"])
def test_strict_bypass_skips_the_broken_scope(npufuse):
    report = npufuse.check(BrokenByAdd("strict-scope-check=bypass"), hidden())
    assert "[super_kernel_scope]" in Path(report.plog_path).read_text()
    assert report.variant.tasks == report.baseline.tasks


@pytest.mark.superkernel(scope="proj", outcome="aborted")
def test_strict_abort_fails_the_broken_scope(npufuse):
    report = npufuse.check(BrokenByAdd("strict-scope-check=abort"), hidden())
    assert "[ERROR]" in Path(report.plog_path).read_text()


@pytest.mark.superkernel(scope="proj", segments=1, options="strict-scope-check=abort")
def test_strict_abort_accepts_an_intact_scope(npufuse):
    npufuse.check(TwoMatmuls(), hidden())


@pytest.mark.superkernel(scope="proj", segments=1)
def test_debug_aic_num_forces_fewer_cores(npufuse):
    natural = npufuse.check(TwoMatmuls(), hidden())
    forced = npufuse.check(TwoMatmuls("debug-aic-num=4:debug-aiv-num=8"), hidden())
    # The decode tiling splits the skinny projections' N and K over every AI Cube core.
    assert (natural.superkernels["proj"].kernel_type, natural.superkernels["proj"].block_dim) == ("MIX_AIC_1_0", 24)
    assert (forced.superkernels["proj"].kernel_type, forced.superkernels["proj"].block_dim) == ("MIX_AIC_1_2", 4)
    assert forced.variant.time_us > natural.variant.time_us


@pytest.mark.npu_target("a3")  # where SuperKernel exists at all; on a2 the scope is unsupported for that reason
@pytest.mark.superkernel(scope="proj", outcome="unsupported")
def test_reduce_overhead_ignores_superkernel_scopes(npufuse):
    with pytest.warns(ScopeIgnoredWarning, match="SuperKernel scope.s. proj ignored in reduce-overhead mode"):
        report = npufuse.check(TwoMatmuls(), hidden(), mode="reduce-overhead")
    assert "only in max-autotune" in report.superkernels["proj"].reason


class NoneInside(TwoMatmuls):
    """super_kernel(None) inside a scope keeps the ops in it out of the SuperKernel."""

    def forward(self, x):
        with torchair.scope.super_kernel("proj", ""):
            y = x @ self.a
            with torchair.scope.super_kernel(None):
                y = y @ self.b
            return y @ self.a[: HIDDEN, :HIDDEN]


@pytest.mark.superkernel(scope="proj", segments=2, breaks=[])
def test_super_kernel_none_carves_ops_out(npufuse):
    report = npufuse.check(NoneInside(), hidden())
    assert len(report.variant.kernels) == 2 + 3


class Collectives(torch.nn.Module):
    """Tensor-parallel projection: AllReduce and AllGather fuse; a Broadcast splits the scope but
    strict-scope-check does not check communication ops."""

    def __init__(self, group):
        super().__init__()
        self.group = group
        (w,) = weights((HIDDEN, HIDDEN))
        self.w = torch.nn.Parameter(w)

    def forward(self, x):
        with torchair.scope.super_kernel("tp", "strict-scope-check=abort"):
            y = fc.all_reduce(x @ self.w, "sum", self.group)
            y = fc.all_gather_tensor(y, 0, self.group)
            y = fc.broadcast(y, 0, self.group)
            return y @ self.w


@pytest.mark.superkernel(scope="tp", segments=2, breaks=["_c10d_functional::broadcast"])
def test_collectives_fuse_and_are_not_strictly_checked(npufuse, world):
    report = npufuse.check(Collectives(world), hidden())
    assert report.superkernels["tp"].names[0] == "sk_tp_start_MatMulV3_end_HcomAllGather"
