"""Seed 001's warning in the report: two streams whose kernels each take every Cube core take turns, and
the report says how much of their possible overlap is lost; a stream expectation that cannot be met for
that reason says why."""

import pytest
import torch
import torchair as tng

from pytest_npufuse import compare
from pytest_npufuse.gate.expectations import parse_multistream


class TwoBigMatmuls(torch.nn.Module):
    """Two projections that each want every Cube core, the second on a side stream."""

    def forward(self, a, b, c):
        first = a @ b
        with tng.scope.npu_stream_switch("1"):
            second = a @ c
        return first, second


class LightSide(torch.nn.Module):
    """A projection on the main stream and a small element-wise op on the side stream."""

    def forward(self, a, b, c):
        first = a @ b
        with tng.scope.npu_stream_switch("1"):
            second = c[:8] * 2
        return first, second


@pytest.fixture(scope="module")
def saturated():
    gen = torch.Generator().manual_seed(6)
    a, b, c = (torch.randn(4096, 4096, generator=gen) for _ in range(3))
    return compare(TwoBigMatmuls(), a, b, c)


def test_a_cube_saturated_split_is_reported_with_the_overlap_lost(saturated):
    contention = saturated.contention
    assert contention is not None and contention.unit == "Cube"
    assert set(contention.streams) == {"default", "1"} or len(contention.streams) == 2
    assert contention.lost_pct > 90  # the two matmuls serialise on the Cube
    assert "contention:" in saturated.summary() and "Cube" in saturated.summary()


def test_an_unmeetable_stream_expectation_says_why(saturated):
    failures = parse_multistream((), {"streams": 2, "min_speedup": 1.05}).failures(saturated)
    assert any("cannot be met" in failure and "Cube" in failure for failure in failures), failures


def test_a_light_side_stream_is_not_contention():
    gen = torch.Generator().manual_seed(6)
    a, b, c = (torch.randn(1024, 1024, generator=gen) for _ in range(3))
    assert compare(LightSide(), a, b, c).contention is None
