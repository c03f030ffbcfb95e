"""A training step's graphs on one timeline: each starts when the previous one ended."""

from __future__ import annotations

import math
from dataclasses import replace

from pytest_npufuse.simulate.step import chain_runs
from pytest_npufuse.simulate.timeline import Bound, KernelRun, RunReport


def run(time_us: float, host_us: float, *names: str) -> RunReport:
    kernels = tuple(KernelRun(name, "aten::mm", "default", 1.0 + i, 2.0 + i, 1, "cube") for i, name in enumerate(names))
    device_us = time_us - host_us
    return RunReport("variant", "a3", "max-autotune", time_us, device_us, host_us, Bound.DEVICE, len(names), kernels)


def test_graphs_run_back_to_back():
    step = chain_runs([run(10.0, 1.0, "MatMul"), run(30.0, 2.0, "backward/MatMul", "backward/MatMul_1")])
    assert step.time_us == 40.0 and step.host_us == 3.0 and step.device_us == 37.0 and step.tasks == 3
    assert [(k.name, k.start_us) for k in step.kernels] == [
        ("MatMul", 1.0), ("backward/MatMul", 11.0), ("backward/MatMul_1", 12.0)
    ]
    assert step.bound == Bound.DEVICE


def test_a_graph_that_cannot_finish_makes_the_step_unable_to_finish():
    hung = replace(run(math.inf, 0.0), failure="modeled hang", kernels=())
    step = chain_runs([run(10.0, 1.0, "MatMul"), hung])
    assert step.failure == "modeled hang" and step.time_us == math.inf and step.kernels == ()


def test_one_graph_is_its_own_step():
    only = run(5.0, 1.0, "MatMul")
    assert chain_runs([only]) is only
