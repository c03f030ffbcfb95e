"""``torch_npu.profiler.profile`` / ``torch_npu.npu.profile``: the modeled device's per-module and per-op
tables of the compiled graphs run inside the block (method three of docs/feature-docs.md#scope-analysis)."""

import pytest
import torch

from pytest_npufuse import compile_model, torch_npu
from pytest_npufuse.errors import ArgumentError, NotModeledError
from pytest_npufuse.report.attribution import module_times
from pytest_npufuse.shim import npu


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.self_attn = torch.nn.Linear(64, 64)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))

    def forward(self, x):
        x = x + self.self_attn(x).softmax(-1)
        return x + self.mlp(x)


def test_the_per_module_table_covers_every_call_inside_the_block():
    compiled, backend = compile_model(Block())
    x = torch.randn(128, 64)
    compiled(x)  # compiled (and run) before the block: not profiled
    with torch_npu.profiler.profile() as prof:
        compiled(x)
        compiled(x)
    (graph,) = backend.graphs
    once = {row.path: row for row in module_times(graph.program, graph.run)}
    table = {row.path: row for row in prof.attribution().modules}
    assert table["mlp"].total_us == pytest.approx(2 * once["mlp"].total_us)
    assert table["self_attn"].kernels == 2 * once["self_attn"].kernels
    assert table[""].total_us == pytest.approx(2 * once[""].total_us)
    text = prof.module_table()
    assert "mlp" in text and "self_attn" in text
    assert prof.key_averages().table().splitlines()[0].startswith("OP Type")


def test_the_guide_s_npu_profile_spelling_records_too():
    compiled, _ = compile_model(Block())
    with npu.profile(use_npu=True) as prof:
        compiled(torch.randn(128, 64))
    assert prof.attribution().module("mlp").kernels > 0


def test_distinct_graphs_with_the_same_kernel_names_keep_their_own_modules():
    class Other(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(64, 64)

        def forward(self, x):
            return self.head(x).softmax(-1)

    block, first = compile_model(Block())
    other, second = compile_model(Other())
    x = torch.randn(128, 64)
    with torch_npu.profiler.profile() as prof:
        block(x)
        other(x)
    (a,), (b,) = first.graphs, second.graphs
    assert {k.name for k in a.program.kernels} & {k.name for k in b.program.kernels}
    alone = {row.path: row for graph in (a, b) for row in module_times(graph.program, graph.run) if row.path}
    modules = prof.attribution()
    for path in ("head", "mlp", "self_attn"):
        assert (modules.module(path).kernels, modules.module(path).total_us) == pytest.approx(
            (alone[path].kernels, alone[path].total_us)
        )


def test_a_training_step_s_backward_counts_in_the_backward_column():
    block = Block()
    compiled, _ = compile_model(block)
    with torch_npu.profiler.profile() as prof:
        compiled(torch.randn(128, 64)).sum().backward()
    attribution = prof.attribution()
    assert attribution.step and sum(row.backward_us for row in attribution.op_types) > 0
    assert "Backward(us)" in prof.key_averages().table()


def test_a_profile_without_device_data_says_why():
    with torch_npu.profiler.profile(activities=[torch_npu.profiler.ProfilerActivity.CPU]) as prof:
        compile_model(Block())[0](torch.randn(128, 64))
    with pytest.raises(ArgumentError) as exc:
        prof.module_table()
    assert (exc.value.op, exc.value.argument) == ("torch_npu.profiler.profile", "activities")
    with pytest.raises(ArgumentError) as exc:
        with torch_npu.profiler.profile() as empty:
            Block()(torch.randn(2, 64))
        empty.key_averages()
    assert exc.value.op == "torch_npu.profiler.profile"
    with pytest.raises(NotModeledError) as exc:
        torch_npu.profiler.profile(schedule=lambda step: None)
    assert (exc.value.op, exc.value.argument) == ("torch_npu.profiler.profile", "schedule")
