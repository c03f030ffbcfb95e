"""A config's own FX passes (``post_grad_custom_pre_pass`` / ``_post_pass``): run on each aten graph
with the user's config, and the stream markers they insert (``air::`` for TorchAir, ``npugraph_ex::``
for npugraph_ex) planned as the scopes' own streams and events. The model and pass follow TorchAir's
post_grad_custom_pass documents (Ascend/torchair docs/zh/ascend_ir/features/basic/post_grad_custom_pass.md,
docs/zh/npugraph_ex/advanced/post_grad_custom_pass.md)."""

from __future__ import annotations

import pytest
import torch

from pytest_npufuse import torchair
from pytest_npufuse.errors import ConfigError
from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.target.profile import load_profile


@pytest.fixture
def session(shim):
    with modeled_run(load_profile("a3")) as run:
        yield run


def _model(x):
    """The documents' model (mm, abs, add, sub) as one function."""
    mm = torch.mm(x, x)
    return torch.abs(mm) + 1, x - mm


def _stream_pass(namespace: str, seen: list):
    """The documents' pass: mm and abs on stream ``stream_1``, sub after abs through record/wait
    (cases/realworld/test_torchair_post_grad_custom_pass_streams.py writes it as the documents do)."""
    ops = getattr(torch.ops, namespace)
    aten = torch.ops.aten

    def custom_pass(gm, example_inputs, config):
        seen.append((config, len(example_inputs)))
        graph = gm.graph
        by_target = {node.target: node for node in graph.nodes if node.op == "call_function"}
        first, last, waiter = by_target[aten.mm.default], by_target[aten.abs.default], by_target[aten.sub.Tensor]
        with graph.inserting_before(first):
            graph.call_function(ops.scope_enter.default, (["_user_stream_label"], ["stream_1"]))
        with graph.inserting_after(last):
            record = graph.call_function(ops.record.default, ())
        with graph.inserting_after(record):
            graph.call_function(ops.scope_exit.default, ())
        with graph.inserting_before(waiter):
            graph.call_function(ops.wait.default, ([record],))

    return custom_pass


def _check_streams_and_event(graph) -> None:
    assert graph.plan.streams.kernel_stream == {"MatMulV3": "stream_1", "Abs": "stream_1", "Add": "default", "Sub": "default"}
    record, wait = graph.program.syncs
    assert (record.kind, record.stream, record.position) == ("record", "stream_1", 2)  # after abs
    assert (wait.kind, wait.stream, wait.position, wait.event) == ("wait", "default", 3, record.event)  # before sub


@pytest.mark.parametrize("stage", ["post_grad_custom_pre_pass", "post_grad_custom_post_pass"])
def test_a_torchair_configs_pass_places_ops_on_streams_with_air_markers(session, stage):
    seen: list = []
    config = torchair.CompilerConfig()
    setattr(config, stage, _stream_pass("air", seen))
    x = torch.randn(3, 3)
    add, sub = torch.compile(_model, backend=torchair.get_npu_backend(compiler_config=config), dynamic=False)(x)
    assert torch.allclose(add, torch.abs(x @ x) + 1) and torch.allclose(sub, x - x @ x)
    assert seen == [(config, 1)]  # the user's own config and the graph's example inputs
    graph = session.graphs()[0]
    _check_streams_and_event(graph)
    assert graph.sanitizer.races == ()  # GE orders the cross-stream reads by their data


def test_an_npugraph_ex_options_pass_places_ops_on_streams_and_its_unsynchronised_read_races(session):
    """In npugraph_ex's captured graph only events order streams (GE derives cross-stream edges from the
    data, an aclgraph does not): the document's ``add`` reads ``abs`` from ``stream_1`` with no wait
    before it, a race the sanitizer names; ``sub`` waits and is right."""
    import npugraph_ex

    seen: list = []
    options = {"post_grad_custom_pre_pass": _stream_pass("npugraph_ex", seen)}
    x = torch.randn(3, 3)
    add, sub = torch.compile(_model, backend="npugraph_ex", options=options, dynamic=False)(x)
    assert torch.allclose(sub, x - x @ x) and torch.isnan(add).all()
    assert isinstance(seen[0][0], npugraph_ex.CompilerConfig) and seen[0][0].post_grad_custom_pre_pass is not None
    graph = session.graphs()[0]
    _check_streams_and_event(graph)
    (race,) = graph.sanitizer.races
    assert (race.first.kernel, race.first.stream, race.second.kernel, race.second.stream) == ("Abs", "stream_1", "Add", "default")


def test_pre_pass_runs_before_post_pass_and_a_failing_pass_stops_the_compile(shim):
    order: list[str] = []
    config = torchair.CompilerConfig()
    config.post_grad_custom_post_pass = lambda gm, inputs, cfg: order.append("post")
    config.post_grad_custom_pre_pass = lambda gm, inputs, cfg: order.append("pre")
    torch.compile(lambda x: x + 1, backend=torchair.get_npu_backend(compiler_config=config))(torch.ones(2))
    assert order == ["pre", "post"]

    def refuses(gm, inputs, cfg):
        raise RuntimeError("pattern not supported")

    config.post_grad_custom_pre_pass = refuses
    with pytest.raises(Exception, match="pattern not supported"):
        torch.compile(lambda x: x * 3, backend=torchair.get_npu_backend(compiler_config=config))(torch.ones(2))


def test_a_pass_option_takes_a_function_or_none(shim):
    config = torchair.CompilerConfig()
    with pytest.raises(ConfigError) as exc:
        config.post_grad_custom_pre_pass = "my_pass"
    assert exc.value.argument == "config.post_grad_custom_pre_pass"
    config.post_grad_custom_pre_pass = None
    assert config.post_grad_custom_pre_pass.value is None
