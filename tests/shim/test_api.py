"""TorchAir and torch.npu API parity: option strings, the CompilerConfig tree, scopes, torchair.ops,
the import shim, torch.npu on the CPU, npugraph_ex, and ``python -m pytest_npufuse run``."""

from __future__ import annotations

import importlib
import io
import os
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

from pytest_npufuse import compare, install_shims, torch_npu, torchair, uninstall_shims
from pytest_npufuse.cli.main import main
from pytest_npufuse.errors import (
    CaptureError,
    NotModeledError,
    OptionsError,
    OptionsWarning,
    ScopeError,
    ScopeIgnoredWarning,
    UnknownOptionError,
)
from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.plan.options import OPTIONS, ParserPath, parse_options
from pytest_npufuse.shim import state
from pytest_npufuse.target.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
SEEDS = Path("/work/shared/seeds")


# ---------------------------------------------------------------- SuperKernel options (CANN's parser)

VALID = {
    "stream-fusion": "1", "feed-sync-all": "1", "strict-scope-check": "bypass", "dcci-before-kernel-start": "GroupedMatmul",
    "dcci-after-kernel-end": "A,B", "dcci-disable-on-kernel": "C", "debug-aic-num": "12", "debug-aiv-num": "24",
    "early-start": "2", "preload-code": "max", "split-mode": "64", "func-align": "0", "debug-dcci-all": "1",
    "debug-sync-all": "1", "profiling": "1", "compile-options": "-g",
}


def test_every_cann_option_key_parses():
    assert set(VALID) == set(OPTIONS) and len(OPTIONS) == 16
    parsed = parse_options("sp1", ":".join(f"{k}={v}" for k, v in VALID.items()))
    assert dict(parsed.values) == VALID
    assert parse_options("sp1", "").get("early-start") == "1" and parse_options("sp1", "").get("split-mode") == "4"


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("early-start=3", "early-start"),
        ("preload-code=all", "preload-code"),
        ("split-mode=0", "split-mode"),
        ("split-mode=65", "split-mode"),
        ("func-align=3", "func-align"),
        ("func-align=1", "func-align"),
        ("profiling=yes", "profiling"),
        ("compile-options=-g,,-O2", "compile-options"),
        ("early-strat=1", "early-strat"),
        ("profiling=1:profiling=0", "profiling"),
        ("split-mode=", "split-mode"),
    ],
)
def test_bad_values_are_cann_errors_naming_the_scope(text, option):
    with pytest.raises(OptionsError) as info:
        parse_options("sp1", text)
    assert (info.value.op, info.value.argument) == ("super_kernel", option)
    assert "super_kernel scope 'sp1': [Super Kernel] Invalid compile option" in str(info.value)


def test_an_entry_without_equals_warns_and_is_skipped():
    with pytest.warns(OptionsWarning, match="stream-fusion do not match option=\\{value\\}; skipped"):
        parsed = parse_options("sp1", "stream-fusion:feed-sync-all=1")
    assert dict(parsed.values) == {"feed-sync-all": "1"} and len(parsed.notes) == 1


def test_aclgraph_path_keeps_its_subset_and_drops_the_rest_with_a_note():
    parsed = parse_options("sk1", "early_start=0:debug-sync-all=1:dcci_after_kernel_end=.*:split-mode=9:bogus=1", ParserPath.ACLGRAPH)
    assert dict(parsed.values) == {"early-start": "0", "debug-sync-all": "1", "dcci-after-kernel-end": ".*"}
    assert [n.split(": ")[-1] for n in parsed.notes] == ["split-mode; dropped.", "bogus; dropped."]
    with pytest.raises(OptionsError) as exc:
        parse_options("sk1", "early-start=2", ParserPath.ACLGRAPH)
    assert (exc.value.op, exc.value.argument) == ("super_kernel", "early-start")


class _TwoMatmuls(torch.nn.Module):
    def __init__(self, options: str = "", scope: str = "proj") -> None:
        super().__init__()
        self.options, self.scope = options, scope

    def forward(self, x):
        with torchair.scope.super_kernel(self.scope, self.options):
            return (x @ x) @ x


def test_parsed_options_reach_the_segments():
    backend = torchair.get_npu_backend()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(_TwoMatmuls("early-start=0:preload-code=none:split-mode=8"), backend=backend, fullgraph=True)(torch.ones(8, 8))
    (segment,) = backend.graphs[0].plan.scope("proj").segments
    assert segment.options.get("preload-code") == "none" and segment.options.get("split-mode") == "8"
    assert segment.early_start is False and segment.code_copies == 8 and not segment.preload


def test_reduce_overhead_ignores_the_scope_once_without_checking_its_options():
    with pytest.warns(ScopeIgnoredWarning, match="'?proj'? ignored in reduce-overhead mode") as caught:
        report = compare(_TwoMatmuls("not an option=at all:x"), torch.ones(8, 8), mode="reduce-overhead")
    assert len([w for w in caught if w.category is ScopeIgnoredWarning]) == 1
    assert report.superkernels["proj"].outcome == "unsupported"
    assert "only in max-autotune" in report.superkernels["proj"].reason


# ---------------------------------------------------------------- CompilerConfig tree

def test_compiler_config_tree_accepts_what_real_code_sets():
    config = torchair.CompilerConfig()
    config.mode = "npugraph_ex"
    config.debug.graph_dump.type = "pbtxt"
    config.debug.aclgraph.clone_input = False
    config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
    config.experimental_config.frozen_parameter = True
    config.experimental_config.enable_view_optimize = False
    config.experimental_config.topology_sorting_strategy = "StableRDFS"
    config.experimental_config.aclgraph._super_kernel_optimize = True
    config.ge_config.enable_single_stream = True
    config.ge_config.aicore_num = "24|48"
    config.export.experimental.enable_lite_export = True
    config.dump_config.dump_layer = " Test1 Test2 "
    config.aclgraph_config.use_custom_pool = None
    assert config.run_mode == "npugraph_ex" and config.leaves()["config.ge_config.aicore_num"] == "24|48"


def test_misspelt_config_option_names_the_nearest_real_one():
    config = torchair.CompilerConfig()
    with pytest.raises(AttributeError) as exc:
        config.experimental_config.enable_view_optimise = False
    assert exc.value.argument == "config.experimental_config.enable_view_optimise"
    with pytest.raises(ValueError) as exc:
        config.debug.grahp_dump.type = "txt"
    assert exc.value.argument == "config.debug.grahp_dump"
    with pytest.raises(UnknownOptionError) as exc:
        config.aclgraph_config.use_custom_poll = None
    assert exc.value.argument == "config.aclgraph_config.use_custom_poll"


def test_bad_config_values_use_torchairs_words():
    config = torchair.CompilerConfig()
    with pytest.raises(ValueError) as exc:
        config.mode = "turbo"
    assert exc.value.argument == "config.mode"
    with pytest.raises(ValueError) as exc:
        config.debug.aclgraph.static_capture_size_limit = 0
    assert exc.value.argument == "config.debug.aclgraph.static_capture_size_limit"


def test_single_stream_config_keeps_every_kernel_on_one_stream():
    class Side(torch.nn.Module):
        def forward(self, x):
            y = x @ x
            with torchair.scope.npu_stream_switch("1"):
                z = x + 1
            return y, z

    config = torchair.CompilerConfig()
    config.ge_config.enable_single_stream = True
    backend = torchair.get_npu_backend(compiler_config=config)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(Side(), backend=backend, fullgraph=True)(torch.ones(4, 4))
    assert set(backend.graphs[0].plan.streams.kernel_stream.values()) == {"default"}


# ---------------------------------------------------------------- scopes of today

class _Switch(torch.nn.Module):
    def __init__(self, **kwargs) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        y = x + 1
        with torchair.scope.npu_stream_switch("1", 0, **self.kwargs):
            z = x @ x
        return y, z


def test_npu_stream_switch_takes_enable_inner_parallel_in_max_autotune():
    report = compare(_Switch(enable_inner_parallel=False), torch.ones(4, 4))
    assert report.streams == ("default", "1")
    with pytest.raises(ScopeError) as exc:
        compare(_Switch(enable_inner_parallel=False), torch.ones(4, 4), mode="reduce-overhead")
    assert (exc.value.op, exc.value.where.startswith(__file__ + ":")) == ("npu_stream_switch", True)
    with pytest.raises(ScopeError) as exc:
        torchair.scope.npu_stream_switch("1", 0, "yes")
    assert (exc.value.op, exc.value.argument) == ("npu_stream_switch", "enable_inner_parallel")


class _Marked(torch.nn.Module):
    def __init__(self, marked: bool) -> None:
        super().__init__()
        self.marked = marked

    def forward(self, x):
        if not self.marked:
            return (x @ x) + 1
        with torchair.scope.op_never_timeout(True), torchair.scope.data_dump():
            y = x @ x
        with torchair.scope.op_never_timeout(False):
            return y + 1


def test_op_never_timeout_and_data_dump_are_recorded_without_numeric_effect():
    backend = torchair.get_npu_backend()
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(_Marked(True), backend=backend, fullgraph=True)(torch.ones(4, 4))
    first, second = backend.graphs[0].program.kernels
    assert (first.annotations.never_timeout, first.annotations.data_dump) == (True, True)
    assert (second.annotations.never_timeout, second.annotations.data_dump) == (False, False)
    plain = compare(_Marked(False), torch.ones(4, 4))
    assert torch.equal(out, _Marked(False)(torch.ones(4, 4)))
    assert backend.graphs[0].run.time_us == plain.variant.time_us
    with pytest.raises(TypeError) as exc:
        torchair.scope.op_never_timeout(1)
    assert (exc.value.op, exc.value.argument) == ("op_never_timeout", "enable")


def test_torchair_ops_reexports_torch_npu_ops_by_name():
    assert torchair.ops.npu_fused_infer_attention_score is torch_npu.npu_fused_infer_attention_score
    if not hasattr(torch_npu, "npu_fused_infer_attention_score_v2"):
        with pytest.raises(AttributeError) as missing:
            torchair.ops.npu_fused_infer_attention_score_v2  # noqa: B018
        assert missing.value.gap.name == "torch_npu.npu_fused_infer_attention_score_v2"
    with pytest.raises(NotModeledError) as exc:
        torchair.ops.npu_sort_v3  # noqa: B018
    assert (exc.value.gap.kind, exc.value.gap.name) == ("name", "torchair.ops.npu_sort_v3")
    with pytest.raises(NotModeledError) as exc:
        torchair.dynamo_export  # noqa: B018
    assert (exc.value.gap.kind, exc.value.gap.name) == ("name", "torchair.dynamo_export")
    assert not hasattr(torchair, "dynamo_export") and getattr(torchair.ops, "npu_sort_v3", None) is None


# ---------------------------------------------------------------- the shim

def test_shim_maps_torchair_and_torch_npu_and_their_submodules(shim):
    import torch_npu as shimmed_npu
    import torchair as shimmed
    from torchair.configs.compiler_config import CompilerConfig
    from torchair.core.utils import logger

    assert shimmed is torchair and shimmed_npu is torch_npu
    assert CompilerConfig is torchair.CompilerConfig and logger.name == "torchair"
    assert importlib.import_module("torchair.scope") is torchair.scope and shimmed_npu.npu is torch.npu
    assert importlib.import_module("torchair.npu_fx_compiler").get_npu_backend is torchair.get_npu_backend
    graph_pass = importlib.import_module("torchair._acl_concrete_graph.graph_pass")
    assert graph_pass.inplaceable_npu_ops is importlib.import_module("npugraph_ex._acl_concrete_graph.graph_pass").inplaceable_npu_ops
    acl_concrete_graph = importlib.import_module("torchair._acl_concrete_graph.fx2acl_converter").AclConcreteGraph
    with pytest.raises(NotModeledError) as exc:
        acl_concrete_graph.__call__(None)
    assert exc.value.op == "torchair._acl_concrete_graph.fx2acl_converter.AclConcreteGraph.__call__"
    with pytest.raises(ModuleNotFoundError) as missing:  # the shim does not model it
        importlib.import_module("torchair._acl_concrete_graph.acl_graph")
    assert missing.value.name == "torchair._acl_concrete_graph.acl_graph"
    with pytest.raises(NotModeledError) as exc:
        importlib.import_module("torchair.ge").Tensor  # noqa: B018
    assert exc.value.op == "torchair.ge.Tensor"
    assert "shim active: torchair -> pytest_npufuse.torchair" in shim.describe()


def test_shim_never_shadows_a_real_package(tmp_path, monkeypatch):
    was_active = state().active
    uninstall_shims()
    assert not hasattr(torch, "npu") and "npugraph_ex" not in torch._dynamo.list_backends()
    (tmp_path / "torchair").mkdir()
    (tmp_path / "torchair" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = install_shims()
    try:
        assert installed.modules == ("torch_npu", "npugraph_ex") and installed.real == ("torchair",)
        assert importlib.import_module("torchair").REAL is True
    finally:
        uninstall_shims()
        sys.modules.pop("torchair", None)
        monkeypatch.undo()
        if was_active:
            install_shims()


def test_torch_npu_on_the_cpu(shim):
    x = torch.ones(2, 3, device="npu")
    assert x.device.type == "cpu" and torch.zeros(2, device="npu:0").device.type == "cpu"
    assert x.npu() is x and x.to("npu").device.type == "cpu" and x.to(device="npu", dtype=torch.float16).dtype == torch.float16
    assert torch.nn.Linear(2, 2).to("npu").npu().weight.device.type == "cpu"
    count = torch.npu.device_count()
    assert (torch.npu.is_available(), count, torch.npu.current_device()) == (True, 16, 0)  # an A3 node's dies
    torch.npu.set_device("npu:3")
    try:
        assert torch.npu.current_device() == 3 and torch.ones(2, device="npu:1").device.type == "cpu"
    finally:
        torch.npu.set_device(0)
    torch.npu.synchronize()
    with pytest.raises(NotModeledError) as exc:
        torch.ones(2, device="npu:16")
    assert exc.value.argument == "device" and "16 NPUs" in str(exc.value)
    with pytest.raises(NotModeledError) as exc:
        torch.npu.set_device(16)
    assert (exc.value.op, exc.value.argument) == ("torch.npu.set_device", "device")
    with pytest.raises(NotModeledError) as exc:
        torch.npu.mem_get_info  # noqa: B018
    assert (exc.value.gap.kind, exc.value.gap.name) == ("name", "torch.npu.mem_get_info")


def test_device_queries_name_the_modeled_targets_soc(shim, tmp_path, capsys):
    assert torch.npu.get_device_name(0) == "Ascend910_9391" and torch.npu.is_bf16_supported()
    script = tmp_path / "name.py"
    script.write_text("import torch, torch_npu\nprint('device', torch.npu.get_device_name())\n")
    assert _run(script, "--npu-target=a2")[0] == 0
    assert "device Ascend910B2" in capsys.readouterr().out


def test_eager_streams_and_events_are_already_satisfied_on_the_cpu(shim):
    side = torch.npu.Stream()
    event = torch.npu.Event()
    assert torch.npu.current_stream() == torch.npu.default_stream()
    event.record()
    with torch.npu.stream(side):
        assert torch.npu.current_stream() is side
        event.wait(side)
        y = torch.ones(2, device="npu") * 2
        y.record_stream(side)
    side.wait_stream(torch.npu.current_stream())
    assert event.query() and side.query() and torch.equal(y, torch.full((2,), 2.0))
    event.synchronize()
    with pytest.raises(ValueError) as exc:
        event.elapsed_time(event)
    assert (exc.value.op, exc.value.argument) == ("torch.npu.Event.elapsed_time", "enable_timing")


def test_streams_report_torch_npus_id_device_index_and_type(shim):
    """torch_npu's Stream attributes, which scripts print or pass on (TorchAir's smoke tests print
    ``stream.stream_id``): the default stream is 0, every other stream its own number, on device 0."""
    first, second = torch.npu.Stream(priority=-1), torch.npu.Stream()
    ids = {torch.npu.default_stream().stream_id, first.stream_id, second.stream_id}
    assert torch.npu.default_stream().stream_id == 0 and len(ids) == 3 and first.stream_id == first.stream_id
    assert (first.device_index, first.device_type) == (0, int(torch._C._autograd.DeviceType.PrivateUse1))


class _Step(torch.nn.Module):
    """A decode step whose token count is dynamic: two matmuls in one SuperKernel scope."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1024, 1024, dtype=torch.float16), requires_grad=False)

    def forward(self, x):
        with torchair.scope.super_kernel("decode"):
            return (x @ self.w) @ self.w


def test_event_elapsed_time_reads_the_modeled_time_of_the_graphs_called_between_the_records(shim):
    backend = torchair.get_npu_backend()
    step = torch.compile(_Step(), backend=backend, dynamic=False)
    begin, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    x = torch.ones(64, 1024, dtype=torch.float16, device="npu")
    begin.record()
    step(x)
    step(x)
    end.record()
    torch.npu.synchronize()
    (graph,) = backend.graphs
    assert begin.elapsed_time(end) == pytest.approx(2 * graph.run.time_us / 1e3, rel=1e-9)
    with pytest.raises(ValueError) as exc:
        torch.npu.Event(enable_timing=True).elapsed_time(end)
    assert (exc.value.op, exc.value.argument) == ("torch.npu.Event.elapsed_time", "end_event")


def test_cache_compile_compiles_a_module_method_with_torchairs_checks(shim):
    model = _Step()
    with pytest.raises(ValueError) as exc:
        torchair.inference.cache_compile(lambda x: x)
    assert (exc.value.op, exc.value.argument) == ("cache_compile", "func")
    config = torchair.CompilerConfig()
    config.experimental_config.frozen_parameter = True
    with pytest.raises(ValueError) as exc:
        torchair.inference.cache_compile(model.forward, config=config, ge_cache=True)
    assert (exc.value.op, exc.value.argument) == ("cache_compile", "ge_cache")
    step = torchair.inference.cache_compile(model.forward, config=config, dynamic=False, fullgraph=True)
    x = torch.ones(8, 1024, dtype=torch.float16)
    assert torch.equal(step(x), model(x))


def test_cache_compile_takes_a_backend_for_its_config_and_refuses_another_config(shim):
    model = _Step()
    config = torchair.CompilerConfig()
    backend = torchair.get_npu_backend(compiler_config=config)
    assert backend.keywords["compiler_config"] is config
    other = torchair.CompilerConfig()
    with pytest.raises(ValueError) as exc:
        torchair.inference.cache_compile(model.forward, config=other, backend=backend)
    assert exc.value.argument == "config"
    assert str(exc.value) == "config in current backend is different from the config during cache generation."
    step = torchair.inference.cache_compile(model.forward, backend=backend, dynamic=False)
    x = torch.ones(8, 1024, dtype=torch.float16)
    assert torch.equal(step(x), model(x))


@pytest.mark.parametrize("clone", [False, True])
def test_an_aclgraph_returns_its_own_output_memory_unless_outputs_are_cloned(shim, clone):
    config = torchair.CompilerConfig()
    config.mode = "npugraph_ex"
    config.debug.aclgraph.enable_output_clone = clone

    def f(x, cache):
        return x + x, cache.mul_(2)

    model = torch.compile(f, backend=torchair.get_npu_backend(compiler_config=config), dynamic=False)
    cache = torch.ones(4)
    first, first_cache = model(torch.ones(4), cache)
    second, second_cache = model(torch.full((4,), 3.0), cache)
    assert torch.equal(second, torch.full((4,), 6.0))
    assert (first.untyped_storage()._cdata == second.untyped_storage()._cdata) is not clone
    # without clones the first call's result was overwritten by the replay, as on the device
    assert torch.equal(first, torch.full((4,), 6.0 if not clone else 2.0))
    assert second_cache.untyped_storage().data_ptr() == cache.untyped_storage().data_ptr()  # the caller's memory
    assert torch.equal(cache, torch.full((4,), 4.0))


def test_debug_dump_nodes_keep_their_folder_in_the_private_path_option(shim, tmp_path):
    config = torchair.CompilerConfig()
    config.debug.data_dump._path = "dumps"  # TorchAir's own tests set the option directly
    assert config.debug.data_dump.path == "dumps"
    config.debug.graph_dump.path = str(tmp_path / "." / "graphs")
    assert config.debug.graph_dump._path.value == str(tmp_path / "graphs")  # stored as its real path
    config.debug.fx_summary._path = "summary"
    with pytest.raises(ValueError) as exc:
        config.debug.fx_summary.path = "summary"  # fx_summary has no path, only _path, as in TorchAir
    assert exc.value.argument == "config.debug.fx_summary.path"


def test_dim_gears_make_each_gear_a_static_graph_and_refuse_other_sizes(shim):
    backend = torchair.get_npu_backend()
    step = torch.compile(_Step(), backend=backend, dynamic=True)
    for tokens in (8, 512):
        x = torch.ones(tokens, 1024, dtype=torch.float16)
        torchair.inference.set_dim_gears(x, {0: [8, 512]})
        step(x)
    assert [graph.program.kernels[0].output_specs[0].shape for graph in backend.graphs] == [(8, 1024), (512, 1024)]
    assert all(graph.plan.scopes[0].outcome == "fused" for graph in backend.graphs)  # static per gear
    odd = torch.ones(100, 1024, dtype=torch.float16)
    torchair.inference.set_dim_gears(odd, {0: [8, 512]})
    with pytest.raises(CaptureError) as exc:
        step(odd)
    assert exc.value.argument == "input 2 dim 0"
    twice = torch.ones(2, 2)
    torchair.inference.set_dim_gears(twice, {1: [1, 2]})
    torchair.inference.set_dim_gears(twice, {1: (1, 2)})  # the same gears again: allowed, as in TorchAir
    # TorchAir checks gears with assertions, in its words (python/torchair/inference/_gear_utils.py)
    with pytest.raises(AssertionError) as exc:
        torchair.inference.set_dim_gears(twice, {0: [1, 2], 1: [1, 2]})
    assert exc.value.argument == "t"
    with pytest.raises(AssertionError) as exc:
        torchair.inference.set_dim_gears(torch.ones(2, 2), {0: [2]})
    assert exc.value.argument == "dim_gears"
    with pytest.raises(AssertionError) as exc:
        torchair.inference.set_dim_gears(torch.ones(2, 2), {2: [1, 2]})
    assert (exc.value.argument, str(exc.value)) == ("dim_gears", "Dim index in dim_gears must be in range [0, 1], but got 2.")
    with pytest.raises(AssertionError) as exc:
        torchair.inference.set_dim_gears(torch.ones(2, 2), {0: [0, 2]})
    assert (exc.value.argument, str(exc.value)) == ("dim_gears", "Gear value at index 0 for dim index 0 must not be 0, but got 0.")


class _NativeStreams(torch.nn.Module):
    """npugraph_ex's multi-stream example: streams and events created in forward, B kept alive on s1."""

    def __init__(self, wait: bool = True) -> None:
        super().__init__()
        self.wait = wait

    def forward(self, in1, in2, in3, in4):
        stream1 = torch.npu.Stream()
        stream2 = torch.npu.Stream()
        event1 = torch.npu.Event()
        event2 = torch.npu.Event()
        add_result = torch.add(in1, in2)
        b = in3 + in4
        event1.record()
        with torch.npu.stream(stream1):
            if self.wait:
                event1.wait(stream1)
            mm_result = torch.mm(b, in4)
            event2.record()
            b.record_stream(stream1)
        mm1 = torch.mm(in3, in4)
        with torch.npu.stream(stream2):
            event2.wait(stream2)
            add2 = torch.add(in3, in4)
        return add_result, mm_result, mm1, add2


def _native_inputs():
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(16, 16, generator=gen) for _ in range(4)]


def test_native_streams_events_and_record_stream_are_captured_in_npugraph_ex(shim):
    report = compare(_NativeStreams(), *_native_inputs(), mode="npugraph_ex")
    assert report.bit_exact and not report.races and len(report.streams) == 3
    apis = {point.api for point in _program(_NativeStreams(), "npugraph_ex").syncs}
    assert {"torch.npu.Event.record", "torch.npu.Event.wait", "Tensor.record_stream", "torch.npu.stream"} <= apis


def _program(model, mode):
    from pytest_npufuse.pipeline.backend import compile_model

    compiled, backend = compile_model(model, mode=mode)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled(*_native_inputs())
    return backend.graphs[0].program


def test_native_streams_run_in_the_eager_reference_mode(shim):
    report = compare(_NativeStreams(), *_native_inputs(), mode="eager")
    assert report.bit_exact and not report.races and report.variant.execution == "eager"


def test_streams_created_in_forward_compile_once(shim):
    with modeled_run(load_profile("a3")) as session:
        compiled = torch.compile(_NativeStreams(), backend="npugraph_ex", dynamic=False)
        torch._dynamo.reset()
        with torch.no_grad():
            first, second = compiled(*_native_inputs()), compiled(*_native_inputs())
    assert len(session.graphs()) == 1 and all(torch.equal(a, b) for a, b in zip(first, second))


def test_a_missing_native_event_wait_is_a_race(shim):
    report = compare(_NativeStreams(wait=False), *_native_inputs(), mode="npugraph_ex")
    assert report.races and "b" in report.races[0].describe().lower()


def test_native_streams_are_refused_in_max_autotune(shim):
    with pytest.raises(ScopeError) as exc:
        compare(_NativeStreams(), *_native_inputs())
    assert exc.value.op == "torch.npu.Event.record"


class _NativeSuperKernel(torch.nn.Module):
    def forward(self, x):
        torch.npu.super_kernel_scope_begin("sk1")
        y = (x @ x) @ x
        torch.npu.super_kernel_scope_end("sk1")
        return y + 1


def _npugraph_ex(model, *inputs, **options):
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="npugraph_ex", fullgraph=True, dynamic=False, options=options)(*inputs)
    return out


def test_npugraph_ex_backend_fuses_native_superkernel_scopes(shim):
    with modeled_run(load_profile("a3")) as session:
        _npugraph_ex(
            _NativeSuperKernel(), torch.ones(8, 8), static_kernel_compile=True, super_kernel_optimize=True,
            super_kernel_optimize_options={"early_start": 0, "dcci_after_kernel_end": [".*"], "split-mode": 4},
        )
        with pytest.warns(ScopeIgnoredWarning, match="SuperKernel optimisation is off"):
            _npugraph_ex(_NativeSuperKernel(), torch.ones(8, 8))
    on, off = (graph.plan.scope("sk1") for graph in session.graphs())
    assert on.outcome == "fused" and on.segments[0].early_start is False
    assert dict(on.segments[0].options.values) == {"early-start": "0", "dcci-after-kernel-end": ".*"}
    assert off.outcome == "unsupported" and session.graphs()[0].plan.mode == "npugraph_ex"
    with pytest.raises(Exception) as exc:
        _npugraph_ex(_NativeSuperKernel(), torch.ones(8, 8), super_kernel_optimise=True)
    assert exc.value.inner_exception.argument == "super_kernel_optimise"


def test_a_checks_options_for_a_native_scope_switch_superkernel_on_for_it(shim):
    """compare/npufuse.check build no backend options: the scope's options (the marker's, compare's options=)
    are how a check turns aclgraph SuperKernel on, and the warning without them says so."""
    with pytest.warns(ScopeIgnoredWarning, match=r"the scope's options turn it on for that scope"):
        off = compare(_NativeSuperKernel(), torch.ones(8, 8), mode="npugraph_ex")
    on = compare(_NativeSuperKernel(), torch.ones(8, 8), mode="npugraph_ex", options={"sk1": "early-start=0"})
    assert off.superkernels["sk1"].outcome == "unsupported" and on.superkernels["sk1"].outcome == "fused"
    assert on.bit_exact


def test_unmatched_native_superkernel_end_uses_torchairs_words(shim):
    class Unmatched(torch.nn.Module):
        def forward(self, x):
            torch.npu.super_kernel_scope_begin("sk1")
            y = x @ x
            torch.npu.super_kernel_scope_end("sk2")
            return y

    with pytest.raises(Exception) as exc:
        compare(Unmatched(), torch.ones(4, 4), mode="npugraph_ex")
    assert (exc.value.argument, exc.value.where.startswith(__file__ + ":")) == ("name", True)


def test_a2_keeps_superkernel_unsupported_and_a_user_profile_turns_it_on(tmp_path):
    profile = tmp_path / "a2sk.toml"
    profile.write_text('base = "a2"\n[target]\nname = "a2sk"\n[superkernel]\nsupported = true\n')
    assert compare(_TwoMatmuls(), torch.ones(8, 8), target="a2").superkernels["proj"].outcome == "unsupported"
    report = compare(_TwoMatmuls(), torch.ones(8, 8), target=str(profile))
    assert report.target == "a2sk" and report.superkernels["proj"].outcome == "fused"


# ---------------------------------------------------------------- python -m pytest_npufuse run

def _seed_code(number: str) -> list[str]:
    (seed,) = SEEDS.glob(f"{number}_*.txt")
    line = next(text for text in seed.read_text().splitlines() if text.startswith("1 2 3 "))
    return line.split(" | ", 1)[1].rsplit(" |", 1)[0].split()


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed documents are not on this machine")
@pytest.mark.parametrize("number, script", [("000", "superkernel_example.py"), ("001", "multistream_example.py")])
def test_example_scripts_are_the_feature_documents_examples_token_for_token(number, script):
    assert (ROOT / "cases" / "scripts" / script).read_text().split() == _seed_code(number)


def _run(script: Path, *options: str) -> tuple[int, str]:
    """``python -m pytest_npufuse run SCRIPT OPTIONS``: its exit status and the report it printed."""
    out = io.StringIO()
    return main(["run", str(script), *options], out), out.getvalue()


def test_run_command_runs_a_script_and_summarises_the_modeled_run(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(
        "import sys, torch, torchair\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        with torchair.scope.super_kernel('sp1', 'early-start=0'):\n"
        "            return (x @ x) @ x\n"
        "m = torch.compile(M(), backend=torchair.get_npu_backend(), dynamic=False)\n"
        "print('out', m(torch.ones(8, 8, device='npu')).sum().item(), sys.argv[1:])\n"
    )
    status, text = _run(script, "--npu-target=a3", "--", "--flag")
    assert status == 0
    assert re.search(r"npufuse run: 1 graph\(s\) modeled on a3", text)
    assert re.search(r"graph 1: max-autotune, 2 kernels in 1 tasks on 1 stream\(s\); [\d.]+ us modeled", text)
    assert "SuperKernel scope 'sp1': fused (1 segment(s)" in text


def test_run_command_models_a_script_whose_model_has_no_weights(tmp_path, capsys):
    """A full-size layer built under init_empty_weights(): npu tensors stay on the meta device, the graph
    is priced, its call returns meta tensors, and the summary says the numerics were not computed."""
    script = tmp_path / "empty.py"
    script.write_text(
        "import torch, torchair, pytest_npufuse\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.randn(7168, 18432, dtype=torch.bfloat16), requires_grad=False)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(x @ self.w)\n"
        "with pytest_npufuse.init_empty_weights():\n"
        "    model = M().to('npu')\n"
        "    x = torch.ones(48, 7168, dtype=torch.bfloat16, device='npu')\n"
        "m = torch.compile(model, backend=torchair.get_npu_backend(), dynamic=False)\n"
        "out = m(x)\n"
        "print('out', out.device, tuple(out.shape), x.device, model.w.to('npu').device)\n"
    )
    status, text = _run(script)
    assert status == 0
    assert "out meta (48, 18432) meta meta" in capsys.readouterr().out
    assert "numerics not computed (timing only: the model is on the meta device)" in text


def test_run_command_reports_an_error_at_the_users_line(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import torchair\nwith torchair.scope.super_kernel(''):\n    pass\n")
    status, text = _run(script)
    assert status == 1
    assert f"(at {script}:2: with torchair.scope.super_kernel(''):)" in text


def test_run_command_prices_each_call_of_a_dynamic_shape_graph_at_its_own_sizes(tmp_path):
    script = tmp_path / "dynamic.py"
    script.write_text(
        "import torch, torchair\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x, w):\n"
        "        with torchair.scope.super_kernel('sp1'):\n"
        "            return torch.relu(x @ w) @ w\n"
        "m = torch.compile(M(), backend=torchair.get_npu_backend(), dynamic=True)\n"
        "w = torch.ones(1024, 1024, dtype=torch.float16)\n"
        "for tokens in (8, 8192):\n"
        "    m(torch.ones(tokens, 1024, dtype=torch.float16), w)\n"
    )
    status, text = _run(script, "--npu-target=a3")
    assert status == 0
    times = [float(t) for t in re.findall(r"; ([\d.]+) us modeled", text)]
    assert "2 graph(s) modeled" in text and len(times) == 2
    # 1024x the tokens: priced at each call's sizes, not the first call's (both calls are mostly the host's
    # path through the dynamic-shape graph, the same ops at either size; the device's share grows)
    assert times[1] > times[0]


def test_run_command_names_the_users_line_of_an_op_that_fails_on_its_values(tmp_path):
    script = tmp_path / "lookup.py"
    script.write_text(
        "import torch, torchair\n"
        "def f(table, ids):\n"
        "    return torch.embedding(table, ids + 100)\n"
        "g = torch.compile(f, backend=torchair.get_npu_backend())\n"
        "g(torch.ones(4, 8), torch.zeros(3, dtype=torch.long))\n"
    )
    status, text = _run(script)
    assert status == 1
    assert f"KernelError: aten::embedding at {script}:3 failed on the values that reached it: IndexError" in text
    assert "Traceback" not in text


def test_run_command_reports_a_graph_break_inside_a_scope_without_a_torch_traceback(tmp_path):
    script = tmp_path / "breaks.py"
    script.write_text(
        "import torch, torchair\n"
        "def f(x):\n"
        "    with torchair.scope.super_kernel('sp1'):\n"
        "        y = x @ x\n"
        "        print(float(y.sum()))\n"
        "        return y @ x\n"
        "g = torch.compile(f, backend=torchair.get_npu_backend())\n"
        "g(torch.ones(4, 4))\n"
    )
    status, text = _run(script)
    assert status == 1
    assert "CaptureError: super_kernel('sp1')" in text and "a graph break inside the block" in text
    assert f"(at {script}:8: g(torch.ones(4, 4)))" in text and "BackendCompilerFailed" not in text


def test_run_command_shows_an_api_check_at_the_users_line_and_the_scripts_own_error_as_python_does(tmp_path):
    checked = tmp_path / "gears.py"
    checked.write_text("import torch, torchair\ntorchair.inference.set_dim_gears(torch.ones(2, 2), {0: [2]})\n")
    status, checked_text = _run(checked)
    assert status == 1
    assert (f"AssertionError: Length of gears for dim index 0 in dim_gears must be in range [2, 100], but got 1. "
            f"(at {checked}:2:") in checked_text
    own = tmp_path / "own.py"
    own.write_text("raise ValueError('the script says no')\n")
    status, own_text = _run(own)
    assert status == 1
    assert "the script says no" not in own_text  # Python's traceback on stderr, not a one-line report


def test_run_command_shows_an_op_check_failing_inside_the_scripts_torch_compile_at_its_line(tmp_path):
    """Under Dynamo an op's value checks run in its fake kernel, so Dynamo wraps their error: the report
    still names it as torch_npu would raise it, at the script's line."""
    script = tmp_path / "quant.py"
    script.write_text(
        "import torch, torch_npu\n"
        "quantize = torch.compile(lambda x, s: torch_npu.npu_quantize(x, s, None, torch.float32, -1), backend='eager')\n"
        "quantize(torch.ones(2, 4), torch.ones(4))\n"
    )
    status, text = _run(script)
    assert status == 1
    assert "ValueError: npu_quantize: dtype=torch.float32 is not implemented" in text and f"{script}:" in text
    assert "Dynamo" not in text and "Traceback" not in text


def test_run_command_runs_the_multistream_example_unchanged():
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(["run", str(ROOT / "cases" / "scripts" / "multistream_example.py"), "--npu-target=a3"], out) == 0
    text = out.getvalue()
    assert "graph 1: reduce-overhead, 7 kernels in 7 tasks on 3 stream(s)" in text and "race" not in text


# ---------------------------------------------------------------- the plugin

SHIMMED_TEST = '''
import torch
import torch_npu
import torchair


class Model(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1", "early-start=0"):
            return torch_npu.npu_swiglu(x @ torch.ones(8, 8, device="npu"))


def test_unchanged_npu_code(npufuse):
    report = npufuse.check(Model(), torch.ones(4, 8).npu())
    assert report.superkernels["sp1"].outcome == "fused" and torch.npu.is_available()
'''


@pytest.mark.parametrize("ini", ["", "npufuse_shim_modules = auto", "npufuse_shim_modules = true"])
def test_plugin_installs_the_shim_and_says_so_in_the_header(pytester, ini):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_shimmed=SHIMMED_TEST)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["npufuse: shim active: torchair -> pytest_npufuse.torchair, torch_npu -> *"])


def test_plugin_shim_off_leaves_imports_alone(pytester):
    was_active = state().active
    uninstall_shims()
    pytester.makeini("[pytest]\nnpufuse_shim_modules = false\n")
    pytester.makepyfile(test_plain="def test_no_torchair():\n    import torchair\n")
    try:
        result = pytester.runpytest("-p", "no:randomly")
    finally:
        if was_active:
            install_shims()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["npufuse: shim off", "*ModuleNotFoundError: No module named 'torchair'*"])


def test_plugin_refuses_a_bad_shim_setting(pytester):
    pytester.makeini("[pytest]\nnpufuse_shim_modules = maybe\n")
    result = pytester.runpytest()
    result.stderr.fnmatch_lines(["*npufuse_shim_modules = 'maybe': use one of auto, true, false*"])


@pytest.mark.parametrize(
    ("ending", "status", "stderr"),
    [("sys.exit('bad input: x.csv')", 1, "bad input: x.csv\n"), ("sys.exit(3)", 3, ""), ("sys.exit()", 0, ""),
     ("sys.exit(None)", 0, ""), ("raise SystemExit(['a', 1])", 1, "['a', 1]\n")],
)
def test_run_command_forwards_a_scripts_exit_message_and_code_as_python_does(tmp_path, capsys, ending, status, stderr):
    script = tmp_path / "exits.py"
    script.write_text(f"import sys\nprint('before')\n{ending}\n")
    out = io.StringIO()
    assert main(["run", str(script)], out) == status
    captured = capsys.readouterr()
    assert captured.err == stderr and captured.out == "before\n"


SPAWNING = """
import multiprocessing as mp
import os


def child(queue):
    import torchair
    queue.put((torchair.__name__, os.environ.get("NPUFUSE_CHILD_TARGET")))


if __name__ == "__main__":
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print("child:", queue.get(timeout=120))
    process.join()
    import sys
    sys.exit(process.exitcode)
"""


def test_run_command_gives_spawned_children_the_shim_and_the_target(tmp_path, capfd):
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNING)
    before = {name: os.environ.get(name) for name in ("NPUFUSE_CHILD_TARGET", "PYTHONPATH")}
    status, text = _run(script, "--npu-target=a2")
    assert status == 0
    assert "child: ('pytest_npufuse.torchair', 'a2')" in capfd.readouterr().out
    assert "processes the script starts get the shim too" in text
    assert {name: os.environ.get(name) for name in before} == before  # the run restores the environment


DEVICE_NAMES = """
import multiprocessing as mp

import torch
import torch_npu  # noqa: F401  (the shim's torch.npu)


def child(queue):
    import torch
    import torch_npu  # noqa: F401

    queue.put(torch.npu.get_device_name())


if __name__ == "__main__":
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print("parent:", torch.npu.get_device_name(), "child:", queue.get(timeout=120))
    process.join()
"""


def test_run_command_models_a_projects_own_target_in_the_script_and_its_children(tmp_path, monkeypatch, capfd):
    (tmp_path / "pyproject.toml").write_text('[tool.npufuse.targets.mine]\nbase = "910b3"\n')
    script = tmp_path / "names.py"
    script.write_text(DEVICE_NAMES)
    monkeypatch.chdir(tmp_path)
    before = os.environ.get("NPUFUSE_CHILD_PYPROJECT")
    assert _run(script, "--npu-target=mine")[0] == 0
    assert "parent: Ascend910B3 child: Ascend910B3" in capfd.readouterr().out
    assert os.environ.get("NPUFUSE_CHILD_PYPROJECT") == before


def test_a_child_target_variable_naming_no_target_is_named_as_the_variable(monkeypatch, tmp_path):
    """NPUFUSE_CHILD_TARGET is set by the run command for its children; junk in it (or a pyproject that is
    gone) names the variable and how it came to be set, not only an unknown target."""
    from pytest_npufuse.errors import ProfileError
    from pytest_npufuse.pipeline import backend

    monkeypatch.setenv("NPUFUSE_CHILD_TARGET", "mine")
    monkeypatch.setenv("NPUFUSE_CHILD_PYPROJECT", str(tmp_path / "gone.toml"))
    with pytest.raises(ProfileError) as exc:
        backend._child_profile()
    assert exc.value.argument == "NPUFUSE_CHILD_TARGET" and "gone.toml" in exc.value.problem
