"""SyncAll inside a SuperKernel (TorchAir's feed-sync-all option).

A SuperKernel launches on the largest block dim of its sub-kernels. A sub-kernel that calls SyncAll on
fewer cores waits at the barrier for cores that never come: the device hangs, unless feed-sync-all=1
inserts the missing SyncAll calls on the idle cores. ``cases::global_norm`` is a custom operator
declared in pyproject.toml ([tool.npufuse.ops]) with ``sync_all = true`` and 8 blocks.
"""

import pytest
import torch

from pytest_npufuse import torchair

_LIB = torch.library.Library("cases", "FRAGMENT")
_LIB.define("global_norm(Tensor x) -> Tensor")


def _global_norm(x: torch.Tensor) -> torch.Tensor:
    """Scale by the global maximum magnitude: every core needs every other core's partial maximum."""
    return x / x.abs().amax().clamp_min(1e-6)


_LIB.impl("global_norm", _global_norm, "CompositeExplicitAutograd")
torch.library.register_fake("cases::global_norm", lambda x: torch.empty_like(x), lib=_LIB)


class Projection(torch.nn.Module):
    def __init__(self, options: str) -> None:
        super().__init__()
        self.options = options
        self.w = torch.nn.Parameter(torch.randn(2048, 2048, generator=torch.Generator().manual_seed(2)) / 45)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torchair.scope.super_kernel("proj", self.options):
            return torch.ops.cases.global_norm(x @ self.w)


def hidden() -> torch.Tensor:
    return torch.randn(2048, 2048, generator=torch.Generator().manual_seed(4))


@pytest.mark.superkernel(scope="proj", outcome="hang")
def test_syncall_on_fewer_cores_hangs(npufuse):
    report = npufuse.check(Projection(""), hidden())
    reason = report.superkernels["proj"].reason
    assert "GlobalNorm (cases::global_norm) calls SyncAll on block dim 8" in reason and "24 cores" in reason
    assert report.variant.failure is not None


@pytest.mark.superkernel(scope="proj", segments=1)
def test_feed_sync_all_fills_the_idle_cores_at_a_cost(npufuse):
    """No hang, but the inserted SyncAll is paid for: here it eats the SuperKernel's small gain."""
    report = npufuse.check(Projection("feed-sync-all=1"), hidden())
    assert report.superkernels["proj"].block_dim == 24
    mm, norm = (k for k in report.variant.kernels if k.parent)
    overhead = npufuse.target.overhead_us
    # A call (its cores' instruction fetch shared over split-mode's 4 code copies), the barrier Early-Start
    # shortens, and the SyncAll fed to the idle cores.
    call = overhead["sk_subkernel_call"] + overhead["fetch_per_core"] * norm.block_dim / 4
    assert norm.start_us - mm.end_us == pytest.approx(
        call + overhead["sk_sync"] - overhead["early_start_overlap"] + overhead["sync_all"]
    )
