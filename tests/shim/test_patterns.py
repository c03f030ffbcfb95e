"""``torchair.register_replacement`` (and npugraph_ex's): a user's own fusion rule replaces each match in the
compiled aten graph, so the model plans the fused op, unless ``pattern_fusion_pass`` is off, the rule's
``extra_check`` refuses, or the match spans two streams (Ascend/torchair docs/zh/context/register_replacement.md,
FX图算子融合Pass配置.md). The rule here is that document's example: add + npu_rms_norm -> npu_add_rms_norm."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torchair
from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.frontend import rewrites


@pytest.fixture
def session(shim, monkeypatch):
    monkeypatch.setattr(rewrites, "_RULES", [])  # rules are process-wide: each test starts with none
    with modeled_run(load_profile("a3")) as run:
        yield run


def _search(x1, x2, gamma):
    x = torch.add(x1, x2)
    y, _ = torch.ops.npu.npu_rms_norm(x, gamma)
    return y, x


def _replace(x1, x2, gamma):
    y, _, x = torch.ops.npu.npu_add_rms_norm(x1, x2, gamma)
    return y, x


def _register(extra_check=None) -> None:
    example = (torch.empty(1, 1, 2), torch.empty(1, 1, 2), torch.empty(2))
    if extra_check is None:
        torchair.register_replacement(search_fn=_search, replace_fn=_replace, example_inputs=example)
    else:
        torchair.register_replacement(search_fn=_search, replace_fn=_replace, example_inputs=example, extra_check=extra_check)


def _model(x1, x2, gamma):
    y, x = _search(x1, x2, gamma)
    return torch.abs(y), torch.sqrt(x)


def _kernels(session, config, *, streams: bool = False) -> list[str]:
    x1, x2, gamma = torch.rand(1, 1, 8), torch.rand(1, 1, 8), torch.ones(8)

    def split(x1, x2, gamma):
        x = torch.add(x1, x2)
        with torchair.scope.npu_stream_switch("1"):
            y, _ = torch.ops.npu.npu_rms_norm(x, gamma)
        return torch.abs(y), torch.sqrt(x)

    compiled = torch.compile(split if streams else _model, backend=torchair.get_npu_backend(compiler_config=config), dynamic=False)
    out = compiled(x1, x2, gamma)
    expected = _model(x1, x2, gamma)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(out, expected))
    return [kernel.op_type for kernel in session.graphs()[-1].program.kernels]


def test_a_registered_rule_fuses_its_match_in_every_compiled_graph(session):
    assert "npu::npu_add_rms_norm" not in _kernels(session, torchair.CompilerConfig())
    _register()
    fused = _kernels(session, torchair.CompilerConfig())
    assert "npu::npu_add_rms_norm" in fused and "npu::npu_rms_norm" not in fused and "aten::add" not in fused


def test_pattern_fusion_pass_off_extra_check_or_two_streams_keep_the_ops(session):
    _register(extra_check=lambda match: match.kwargs["x1"].meta["val"].shape[-1] == 7168)  # the document's check
    assert "npu::npu_add_rms_norm" not in _kernels(session, torchair.CompilerConfig())
    rewrites._RULES.clear()
    _register()
    config = torchair.CompilerConfig()
    config.experimental_config.pattern_fusion_pass = False
    assert "npu::npu_add_rms_norm" not in _kernels(session, config)
    assert "npu::npu_add_rms_norm" not in _kernels(session, torchair.CompilerConfig(), streams=True)


def test_npugraph_ex_registers_the_same_rules_and_its_option_turns_them_off(session):
    import npugraph_ex

    assert npugraph_ex.register_replacement is torchair.register_replacement
    _register()
    x1, x2, gamma = torch.rand(1, 1, 8), torch.rand(1, 1, 8), torch.ones(8)
    torch.compile(_model, backend="npugraph_ex", options={"pattern_fusion_pass": False}, dynamic=False)(x1, x2, gamma)
    assert "npu::npu_add_rms_norm" not in [kernel.op_type for kernel in session.graphs()[-1].program.kernels]
    torch.compile(_model, backend="npugraph_ex", dynamic=False)(x1 + 1, x2, gamma)
    assert "npu::npu_add_rms_norm" in [kernel.op_type for kernel in session.graphs()[-1].program.kernels]
