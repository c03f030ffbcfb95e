"""A training step's modeled device memory: resident parameters and state, gradients, the activations
the backward keeps, and the peak."""

import json
from dataclasses import replace
from types import MappingProxyType

import pytest
import torch
import torch.nn.functional as F

from pytest_npufuse import compare
from pytest_npufuse.errors import DeviceMemoryError
from pytest_npufuse.gate.baseline import Entry
from pytest_npufuse.ir.program import NO_ANNOTATIONS, Buffer, Kernel, Program, TensorSpec
from pytest_npufuse.gate.check_record import check_row
from pytest_npufuse.report.memory import live_peak
from pytest_npufuse.simulate.version import ModelIdentity
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile


def spec(nbytes):
    return TensorSpec((nbytes // 4,), "float32", nbytes)


def test_live_peak_counts_each_storage_from_its_writer_to_its_last_reader():
    info = load_catalog().lookup("aten::add")
    buffers = {"x": Buffer("x", spec(100), None), "a": Buffer("a", spec(10), "k0"), "b": Buffer("b", spec(20), "k1"),
               "c": Buffer("c", spec(40), "k2")}

    def kernel(index, inputs, output):
        return Kernel(index, f"k{index}", output, "aten::add", info, inputs, (output,), (buffers[output].spec,),
                      NO_ANNOTATIONS, 0.0, 0, "float32", "")

    kernels = (kernel(0, ("x",), "a"), kernel(1, ("a",), "b"), kernel(2, ("b",), "c"))
    program = Program(kernels, MappingProxyType(buffers), ("x",), ("c",))
    assert live_peak(program, frozenset({"x"})) == 60  # b and c live while k2 runs; a died at k1
    assert live_peak(program, frozenset()) == 110  # x and a while k0 runs; x dies after its last reader


def test_a_step_reports_its_memory():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    report = compare(model, x, loss=lambda out: F.cross_entropy(out, y), optimizer=optimizer)
    memory = report.memory
    params = sum(p.numel() * 4 for p in model.parameters())
    assert memory.parameters == params and memory.gradients == params
    assert memory.optimizer_state >= 2 * params  # exp_avg and exp_avg_sq (and the step counters)
    assert memory.activations >= 32 * 256 * 4  # the ReLU output kept for the backward
    assert memory.peak > memory.parameters + memory.optimizer_state
    assert "peak" in memory.describe() and set(memory.live) == {"forward", "backward", "optimizer"}
    assert memory.to_json()["peak"] == memory.peak and memory.to_json()["peak_phase"] in memory.live



def test_a_step_whose_parameters_gradients_and_state_exceed_the_die_is_refused_naming_the_largest():
    """Checked against a die of 1 MiB (the real ones hold 32 or 64 GiB, more than a CPU test can allocate):
    AdamW's two moments are the largest part, so the step is refused naming them."""
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    small = replace(load_profile("a3"), hbm_gib=1 / 1024)
    with pytest.raises(DeviceMemoryError) as exc:
        compare(model, torch.randn(8, 256), loss=lambda out: out.sum(), optimizer=optimizer, target=small)
    assert (exc.value.entry, exc.value.bound) == ("optimizer state", 1024**2)


def test_the_check_record_carries_the_memory_of_a_training_step_only():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    identity = ModelIdentity.of([load_profile("a3")], load_catalog()).for_target("a3")

    def record(report):
        return json.loads(json.dumps(check_row("case", report, Entry.of(report, identity), None)))

    memory = record(compare(model, x, loss=lambda out: F.cross_entropy(out, y), target="a3"))["memory"]
    assert memory["parameters"] == (16 * 32 + 32 + 32 * 4 + 4) * 4 and memory["optimizer_state"] == 0
    assert memory["peak"] >= memory["parameters"] + memory["activations"] > memory["parameters"]
    assert "memory" not in record(compare(model, x, target="a3"))
