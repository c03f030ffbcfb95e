"""Absurd and mixed model inputs: timing-only models of any size are priced from shapes without
allocating, meta and real tensors mixed are timed, and numerics that would not fit in the host's memory
are refused with the bound in the error's fields, never a MemoryError from inside torch."""

from __future__ import annotations

import resource

import pytest
import torch

from pytest_npufuse import compare
from pytest_npufuse.errors import ArgumentError
from pytest_npufuse.execute.sample import host_memory
from pytest_npufuse.vocabulary import NumericsStatus

TERA = 10**6  # a 10**6 x 10**6 weight or input: 10**12 elements, 4 TB in float32


class ValueBranch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * (int(x.sum().item()) % 3)


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def test_a_meta_model_of_a_trillion_parameters_is_priced_from_shapes_without_allocating():
    before = _peak_rss_gib()
    with torch.device("meta"):
        model = torch.nn.Linear(TERA, TERA)
    # One rank of a sharded deployment (ranks=): a whole-model capture on one die is refused as too big for its memory.
    report = compare(model, torch.empty(2, TERA, device="meta"), ranks=2)
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED
    assert report.variant.time_us > 1e6  # 4 TB of weight read: seconds on any die
    assert _peak_rss_gib() - before < 1


def test_a_meta_input_of_a_trillion_elements_is_priced_from_shapes():
    report = compare(lambda x: x * 2, torch.empty(TERA, TERA, device="meta"), ranks=2)
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED and report.variant.time_us > 1e6


def test_meta_and_real_inputs_in_one_call_are_timed_without_numerics():
    report = compare(lambda a, b: a + b, torch.randn(2, 8), torch.empty(2, 8, device="meta"))
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED and report.variant.time_us > 0


def test_item_on_a_meta_tensor_is_timed_as_a_value_the_model_reads():
    with torch.device("meta"):
        model = ValueBranch()
    report = compare(model, torch.empty(2, 8, device="meta"))
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED and report.variant.time_us > 0


def test_a_sample_whose_kernel_exceeds_the_host_memory_is_refused_before_any_value_is_made():
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(TERA, TERA), torch.nn.ReLU())
    with pytest.raises(ArgumentError) as caught:
        compare(model, torch.empty(2, TERA, device="meta"), numerics="sample", ranks=2)
    assert (caught.value.argument, caught.value.bound) == ("numerics", host_memory())
