"""TorchAir's and npugraph_ex's ``TORCH_COMPILE_DEBUG=1`` folder, written from the model's compile: the
layout of TorchAir's debug_save documents (Ascend/torchair docs/zh/ascend_ir/features/basic/debug_save.md,
docs/zh/npugraph_ex/dfx/debug_save.md) with the pass files TorchAir writes for the config, each holding the
graph as the model has it at that pass."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

import npugraph_ex
from npugraph_ex._utils.graph_transform_observer import DebugContext as NpugraphExContext
from pytest_npufuse import torchair
from pytest_npufuse.torchair._debugdump import DebugLogHandler
from pytest_npufuse.torchair._utils.graph_transform_observer import DebugContext

ACLGRAPH_PASSES = (
    "graph", "graph_after_post_grad_custom_pre_pass", "graph_after_optimize_noop_ops",
    "graph_after_recover_view_inplace_pattern", "graph_after_apply_pattern_passes", "graph_after_view_to_reshape",
    "graph_after_post_grad_custom_post_pass", "graph_after_remove_cat_ops",
    "graph_after_apply_event_closure_with_multi_stream", "graph_after_apply_event_record",
    "graph_after_eliminate_dead_code", "graph_after_reinplace_inplaceable_ops_pass",
    "graph_after_reinplace_input_mutated_ops", "graph_after_decompose_auto_functionalized",
)
LAST_PASSES = ("graph_after_replace_dynamic_workspace_ops", "graph_after_replace_core_limit_nodes",
               "graph_after_resolve_default_stream_markers")


@pytest.fixture
def debug_dir(shim, tmp_path, monkeypatch):
    """TORCH_COMPILE_DEBUG=1 with torch's debug root in ``tmp_path``, the folder counts from 0, and the
    debug.log handlers taken off the loggers afterwards (as TorchAir's own tests do between cases)."""
    monkeypatch.setenv("TORCH_COMPILE_DEBUG", "1")
    monkeypatch.setattr(DebugContext, "COUNT", -1)
    monkeypatch.setattr(NpugraphExContext, "model_cnt", -1)
    monkeypatch.setattr(NpugraphExContext, "compile_fx_cnt", -1)
    with torch._dynamo.config.patch(debug_dir_root=str(tmp_path)):
        from torch._dynamo.utils import get_debug_dir

        yield Path(get_debug_dir())
    for name in ("torchair", "npugraph_ex"):
        log = logging.getLogger(name)
        for handler in [h for h in log.handlers if isinstance(h, DebugLogHandler)]:
            log.removeHandler(handler)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _expected(folder: str, phase: str, passes) -> list[str]:
    return [f"{folder}/{phase}/{i:03d}_aot_{phase}_{name}.txt" for i, name in enumerate(passes)] + [
        f"{folder}/{phase}/output_code.py"
    ]


def _mul_to_add(gm, example_inputs, config):
    """A pre pass the files must show: every mul becomes an add."""
    for node in gm.graph.nodes:
        if node.target == torch.ops.aten.mul.Tensor:
            node.target = torch.ops.aten.add.Tensor
    gm.recompile()


class _Double(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def test_torchair_aclgraph_training_step_writes_torchairs_debug_folder(debug_dir, caplog):
    caplog.set_level(logging.INFO, logger="torchair")
    config = torchair.CompilerConfig()
    config.mode = "reduce-overhead"
    config.post_grad_custom_pre_pass = _mul_to_add
    config.post_grad_custom_post_pass = lambda gm, example_inputs, config: None
    with pytest.warns(DeprecationWarning):
        backend = torchair.get_npu_backend(compiler_config=config)
    x = torch.randn(4, 4, requires_grad=True)
    out = torch.compile(_Double(), backend=backend, dynamic=False)(x)
    out.sum().backward()
    root = debug_dir / "torchair"
    expected = ["debug.log", "model__0/dynamo_out_graph.txt"]
    for phase in ("forward", "backward"):
        expected += _expected("model__0", phase, ACLGRAPH_PASSES + LAST_PASSES)
    assert _files(root) == sorted(expected)
    forward = root / "model__0" / "forward"
    assert "aten.mul.Tensor" in (forward / "000_aot_forward_graph.txt").read_text()  # as AOT handed it
    assert "aten.add.Tensor" in (forward / "001_aot_forward_graph_after_post_grad_custom_pre_pass.txt").read_text()
    assert "aten.add.Tensor" in (forward / "output_code.py").read_text()  # the graph the model runs
    assert torch.equal(out, x + 2)
    assert "compiler inputs" in (root / "debug.log").read_text()  # the torchair logger's records


def test_npugraph_ex_compile_fx_writes_a_compile_folder_without_a_dynamo_graph(debug_dir):
    def compiler(gm, example_inputs):
        return npugraph_ex.compile_fx(gm, example_inputs, {"pattern_fusion_pass": False, "inplace_pass": False})

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=compiler)

    torch.compile(_Double(), backend=backend)(torch.randn(4, 4))
    passes = [name for name in ACLGRAPH_PASSES if "custom" not in name and name not in (
        "graph_after_apply_pattern_passes", "graph_after_reinplace_inplaceable_ops_pass")]
    passes += ["graph_after_eliminate_self_copy", *LAST_PASSES]  # npugraph_ex's own pass
    assert _files(debug_dir / "npugraph_ex") == sorted(["debug.log", *_expected("compile__0", "compile_fx", passes)])


def test_each_dynamo_graph_has_its_own_numbered_folder_and_max_autotune_no_code(debug_dir):
    backend = torchair.get_npu_backend()
    for size in (2, 3):  # two static graphs
        torch.compile(_Double(), backend=backend, dynamic=False)(torch.randn(size))
    root = debug_dir / "torchair"
    assert (root / "model__1" / "dynamo_out_graph.txt").is_file()
    forward = sorted(p.name for p in (root / "model__1" / "forward").iterdir())
    assert forward[-1] == "005_aot_forward_graph_after_view_to_reshape.txt"  # GE's FX passes; no output_code.py
    assert "004_aot_forward_graph_after_apply_pattern_passes.txt" in forward
    assert "003_aot_forward_graph_after_optimize_sym_input.txt" in forward  # max-autotune's own pass


def test_nothing_is_written_without_the_variable(shim, tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_COMPILE_DEBUG", raising=False)
    with torch._dynamo.config.patch(debug_dir_root=str(tmp_path)):
        torch.compile(_Double(), backend=torchair.get_npu_backend(), dynamic=False)(torch.randn(4))
    assert list(tmp_path.iterdir()) == []
