"""PyPTO's MPMD scheduling (issue 21): a kernel run as subgraph tasks an AI CPU scheduler hands out."""

from dataclasses import replace
from types import MappingProxyType

import pytest

from pytest_npufuse import cost
from pytest_npufuse.cost.mpmd import occupied_cores, scheduled_us
from pytest_npufuse.errors import ProfileError
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile

A2 = load_profile("910b3")


def with_task_cost(profile, per_task_us):
    return replace(profile, overhead_us=MappingProxyType({**profile.overhead_us, "mpmd_task": per_task_us}))


def recurrence(tasks: int):
    """A Vector kernel over a [32, 4, 128, 128] fp32 state; ``tasks`` 0 is an ordinary kernel."""
    entry = {"engine": "vector", "fusable": False, "sync_all": False, "block_dim": "auto", "cost": "elementwise"}
    catalog = load_catalog({"t::kda": {**entry, "mpmd_tasks": tasks} if tasks else entry})
    builder = ProgramBuilder(catalog)
    state = builder.input("s", (32, 4, 128, 128), "float32")
    out = builder.op("t::kda", [state], (32, 4, 128, 128), "float32")
    return next(kernel for kernel in builder.kernels if kernel.node == out)


def body(kernel, profile):
    return cost.body_us(kernel, cost.block_dim(kernel, profile), profile)


def test_with_a_free_scheduler_the_work_runs_in_whole_waves():
    assert scheduled_us(10.0, 80, 40, 0.0) == pytest.approx(10.0)
    assert scheduled_us(10.0, 41, 41, 0.0) == pytest.approx(10.0)
    # 41 tasks on 40 cores: a second wave of one task
    assert scheduled_us(10.0, 41, 40, 0.0) == pytest.approx(2 * 10.0 * 40 / 41)


def test_many_small_tasks_wait_on_the_scheduler():
    # 512 tasks of 2 us of work between 40 cores: the hand-outs, not the cores, set the time
    assert scheduled_us(2.0, 512, 40, 0.4) == pytest.approx(512 * 0.4 + 2.0 * 40 / 512)
    # merging four subgraphs into one task: a quarter of the hand-outs for the same work
    assert scheduled_us(2.0, 128, 40, 0.4) < scheduled_us(2.0, 512, 40, 0.4) / 3


def test_a_kernel_of_few_long_tasks_hides_the_scheduler():
    assert scheduled_us(100.0, 48, 24, 0.4) == pytest.approx(100.0 + 0.4)


def test_an_mpmd_kernel_occupies_a_core_per_task_up_to_the_engine():
    assert occupied_cores(8, 40) == 8
    assert occupied_cores(512, 40) == 40
    assert cost.block_dim(recurrence(8), A2) == 8
    assert cost.block_dim(recurrence(512), A2) == A2.aiv


def test_the_per_task_cost_prices_a_pypto_kernel_and_no_other():
    slow = with_task_cost(A2, 1.0)
    plain = recurrence(0)
    assert body(plain, slow) == body(plain, with_task_cost(A2, 0.0))
    assert body(recurrence(512), slow) > 512 * 1.0
    assert body(recurrence(512), slow) > 3 * body(recurrence(128), slow)
    # a free scheduler leaves the work (in whole waves) of the same kernel run as 40 tasks
    assert body(recurrence(40), with_task_cost(A2, 0.0)) == pytest.approx(body(plain, A2), rel=0.05)


def test_a_negative_task_count_is_a_profile_error():
    entry = {"engine": "vector", "fusable": False, "sync_all": False, "block_dim": "auto", "mpmd_tasks": -1}
    with pytest.raises(ProfileError) as exc:
        load_catalog({"t::bad": entry})
    assert (exc.value.entry, exc.value.bound) == ("[tool.npufuse.ops] [\"t::bad\"] mpmd_tasks", 0)
