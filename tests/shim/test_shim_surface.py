"""The shim's surface for code written against TorchAir and npugraph_ex (issue 22): ``import npugraph_ex``,
``torch.npu.set_stream`` in compiled code, module-like ``hasattr``, a test's own fake ``npu`` device
module, TorchAir's module tree and ``__module__`` names, ``npu_print``, data dumps and
``torch_npu.save_npugraph_tensor``."""

from __future__ import annotations

import importlib
import json
import logging
import re
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

import pytest
import torch
from torch._functorch.aot_autograd import aot_module_simplified

from pytest_npufuse import torch_npu, torchair
from pytest_npufuse.errors import (
    ConfigError, NotModeledError, OpArgumentError, OptionsWarning, ScopeError, ScopeIgnoredWarning,
)
from pytest_npufuse.pipeline.backend import modeled_run
from pytest_npufuse.target.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def session(shim):
    """A ``python -m pytest_npufuse run`` session, so the test can read back every modeled graph."""
    with modeled_run(load_profile("a3")) as run:
        yield run


# ---------------------------------------------------------------- npugraph_ex as a package

class _AddMm(torch.nn.Module):
    def forward(self, x, y):
        return torch.mm(x, y) + 1


def test_npugraph_ex_imports_as_its_package_with_its_public_names(shim):
    import npugraph_ex
    from npugraph_ex.configs.compiler_config import CompilerConfig
    from npugraph_ex.core.utils import EVENT_LEVEL, logger

    assert npugraph_ex.__all__ == ["get_npu_backend", "get_compiler", "compile_fx", "CompilerConfig", "logger", "register_replacement"]
    assert CompilerConfig is npugraph_ex.CompilerConfig and logger.name == "npugraph_ex" and EVENT_LEVEL == 35
    assert torch.npu.npugraph_ex is npugraph_ex and npugraph_ex.scope.limit_core_num is torchair.scope.limit_core_num


def test_npugraph_ex_config_checks_and_maps_its_options_to_torchair(shim):
    import npugraph_ex

    config = npugraph_ex.CompilerConfig()
    config.clone_input = False
    config.inplace_pass = False
    config.super_kernel_optimize = True
    assert config.clone_input.value is False and config.as_dict()[0]["inplace_pass"] is False
    assert config.capture_limit.value == "64"  # npugraph_ex's values are text, its booleans booleans
    tree = config.torchair_config()
    assert tree.run_mode == "npugraph_ex" and tree.debug.aclgraph.clone_input.value == "0"  # TorchAir's text
    assert tree.debug.aclgraph.disable_reinplace_inplaceable_ops_pass.raw is True  # inverted, as TorchAir maps it
    assert tree.experimental_config.aclgraph._super_kernel_optimize.raw is True
    with pytest.raises(ConfigError) as exc:
        config.capture_error_mode = "strict"
    assert exc.value.argument == "CompilerConfig.capture_error_mode"
    with pytest.raises(ConfigError) as exc:
        config.capture_limit = 0
    assert exc.value.argument == "CompilerConfig.capture_limit"
    with pytest.raises(ConfigError) as exc:
        config.data_dump_dir = "/no/such/dir"
    assert exc.value.argument == "CompilerConfig.data_dump_dir"
    with pytest.raises(ValueError) as exc:
        config.update({"clone_inputs": False})
    assert exc.value.argument == "clone_inputs"


def test_npugraph_ex_backend_compiler_and_compile_fx_model_the_graph(session):
    import npugraph_ex

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    backend = npugraph_ex.get_npu_backend(compiler_config=npugraph_ex.CompilerConfig())
    out = torch.compile(_AddMm(), backend=backend, fullgraph=True, dynamic=False)(x, y)

    def custom_backend(gm, example_inputs):  # the npugraph_ex docs' own custom backend, built on compile_fx
        compiler = lambda g, inputs: torch.npu.npugraph_ex.compile_fx(g, inputs, {"clone_input": False})  # noqa: E731
        return aot_module_simplified(gm, example_inputs, fw_compiler=compiler)

    via_fx = torch.compile(_AddMm(), backend=custom_backend, fullgraph=True, dynamic=False)(x, y)
    assert torch.equal(out, torch.mm(x, y) + 1) and torch.equal(via_fx, out)
    assert [graph.plan.mode for graph in session.graphs()] == ["npugraph_ex", "npugraph_ex"]
    assert [k.op_type for k in session.graphs()[1].program.kernels] == ["aten::mm", "aten::add"]


@pytest.mark.parametrize("entry", ["get_npu_backend", "cache_compile"])
def test_custom_decompositions_are_applied_when_lowering(session, entry):
    def addmm_as_two_ops(bias, a, b, beta=1, alpha=1):
        return torch.ops.aten.mul.Tensor(torch.ops.aten.mm.default(a, b), alpha) + bias

    class Linear(torch.nn.Module):
        def forward(self, bias, a, b):
            return torch.addmm(bias, a, b)

    decompositions = {torch.ops.aten.addmm.default: addmm_as_two_ops}
    if entry == "get_npu_backend":
        backend = torchair.get_npu_backend(custom_decompositions=decompositions)
        compiled = torch.compile(Linear(), backend=backend, fullgraph=True, dynamic=False)
    else:
        compiled = torchair.inference.cache_compile(Linear().forward, custom_decompositions=decompositions, dynamic=False)
    generator = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(shape, generator=generator) for shape in ((4,), (3, 2), (2, 4)))
    out = compiled(*inputs)
    # mm then add rounds twice where addmm rounds once: equal to within float32 rounding, not bit for bit.
    torch.testing.assert_close(out, torch.addmm(*inputs), rtol=1e-5, atol=1e-6)
    assert "aten::addmm" not in {k.op_type for k in session.graphs()[0].program.kernels}


def test_npugraph_ex_inference_cache_compile_takes_its_config(session):
    import npugraph_ex

    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 2

    model = Model()
    config = npugraph_ex.CompilerConfig()
    config.force_eager = True
    compiled = npugraph_ex.inference.cache_compile(model.forward, config=config, dynamic=False)
    with unittest.TestCase().assertLogs(npugraph_ex.core.utils.logger, level="INFO") as seen:
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))
    assert seen.records[0].getMessage() == "compiler inputs"  # npugraph_ex's backend compiled it
    graph = session.graphs()[0]
    assert graph.plan.mode == "npugraph_ex"


def test_npugraph_ex_cache_compile_takes_a_backend_and_warns_about_keywords_it_ignores(session):
    """npugraph_ex's cache_compile accepts a backend or a config, and accepts and ignores any other
    keyword (its smoke tests pass ``options={...}``): the model names what it ignores."""
    import npugraph_ex

    class Model(torch.nn.Module):
        def forward(self, x):
            return x + 1

    model = Model()
    with pytest.warns(OptionsWarning, match="ignores options=, as npugraph_ex does"):
        compiled = npugraph_ex.inference.cache_compile(model.forward, options={"force_eager": True})
    assert torch.equal(compiled(torch.zeros(2)), torch.ones(2))
    backend = npugraph_ex.get_npu_backend()
    assert torch.equal(npugraph_ex.inference.cache_compile(model.forward, backend=backend)(torch.ones(2)), torch.full((2,), 2.0))
    assert backend.graphs and backend.run_mode == "npugraph_ex"
    with pytest.raises(OpArgumentError) as exc:
        npugraph_ex.inference.cache_compile(model.forward, backend=backend, config=npugraph_ex.CompilerConfig())
    assert (exc.value.op, exc.value.argument) == ("npugraph_ex.inference.cache_compile", "backend")


# ---------------------------------------------------------------- native streams switched with set_stream

def test_set_stream_inside_a_compiled_function_is_a_stream_scope(session):
    def switch(t):
        default = torch.npu.current_stream()
        s1, s2 = torch.npu.Stream(), torch.npu.Stream()
        event = torch.npu.Event()
        a = torch.add(t, 0)
        event.record()
        torch.npu.set_stream(s1)
        event.wait()
        b = torch.add(a, 1)
        torch.npu.set_stream(s2)
        c = torch.mul(t, 3)
        torch.npu.set_stream(default)
        done = torch.npu.Event()
        done.record(s1)
        done.wait()
        torch.npu.record_stream(c, s2)
        return b, c

    x = torch.randn(3, 3)
    b, c = torch.compile(switch, backend="npugraph_ex", fullgraph=True, dynamic=False)(x)
    assert torch.equal(b, x + 1)
    program = session.graphs()[0].program
    streams = [k.annotations.stream for k in program.kernels]
    assert streams[0] is None and streams[1] == streams[1] and streams[1] != streams[2] and None not in streams[1:]
    assert torch.npu.current_stream() == torch.npu.default_stream()


def test_streams_passed_in_to_a_dynamic_shape_function_stay_its_stream_scopes(session):
    """Streams made outside and passed as arguments with ``dynamic=True`` (as npugraph_ex's smoke test of
    cat across streams does): Dynamo makes int attributes of inputs symbolic there, and a stream's
    priority must stay a constant of the graph, or the stream block breaks the graph
    (cases/realworld/test_npugraph_ex_cat_across_streams_dynamic.py has that test's own function)."""
    side, low = torch.npu.Stream(), torch.npu.Stream(priority=-1)

    def doubled_and_shifted(x, first, second):
        with torch.npu.stream(first):
            doubled = x * 2
        with torch.npu.stream(second):
            shifted = x + 1
        return doubled, shifted

    x = torch.randn(8)
    doubled, shifted = torch.compile(doubled_and_shifted, backend="npugraph_ex", dynamic=True)(x, side, low)
    assert torch.equal(doubled, x * 2) and torch.equal(shifted, x + 1) and low.priority == -1
    graph = session.graphs()[0]
    ops = [k for k in graph.program.kernels if not k.info.ge_shape]  # GE's size ops of the dynamic graph aside
    assert [k.annotations.stream for k in ops] == [side.tag, low.tag]
    assert [k.annotations.stream_priority for k in ops] == [0, -1]


def test_set_stream_left_switched_at_the_end_names_the_open_stream(shim):
    def leaves_it(t):
        torch.npu.set_stream(torch.npu.Stream())
        return t + 1

    # npugraph_ex's own words first, then which switch and the fix
    with pytest.raises(Exception) as exc:
        torch.compile(leaves_it, backend="npugraph_ex", fullgraph=True, dynamic=False)(torch.ones(2))
    assert exc.value.inner_exception.where.startswith(__file__ + ":")
    assert re.match(r"When use npugraph_ex, you must make sure at the end of your code set stream to the same stream as "
                    r"the begin of your code: torch.npu.set_stream\('npu_stream_\d+'\) at .* is still in effect",
                    exc.value.inner_exception.problem)
    torch.npu.set_stream(torch.npu.default_stream())
    inside = torch.npu.Stream()
    with pytest.raises(ScopeError) as exc:
        with torch.npu.stream(inside):
            torch.npu.set_stream(torch.npu.Stream())
    assert exc.value.op == "torch.npu.set_stream"
    torch.npu.set_stream(inside)
    torch.npu.stream(inside).__exit__(None, None, None)
    assert torch.npu.current_stream() == torch.npu.default_stream()


# ---------------------------------------------------------------- a module's contract with Python

def test_hasattr_and_getattr_on_modeled_namespaces_behave_as_on_a_module(shim):
    assert not hasattr(torch.npu, "fake_record_stream") and getattr(torch.npu, "mem_get_info", None) is None
    with pytest.raises(AttributeError) as exc:
        torch.npu.mem_get_info  # noqa: B018
    assert (exc.value.gap.kind, exc.value.gap.name) == ("name", "torch.npu.mem_get_info")
    with pytest.raises(NotModeledError) as exc:
        torch.npu.mem_get_info  # noqa: B018
    assert (exc.value.gap.kind, exc.value.gap.name) == ("name", "torch.npu.mem_get_info")
    assert not hasattr(torchair, "dynamo_export") and not hasattr(torchair.ge, "Const")


def test_torchair_module_tree_and_compatibility_names(shim):
    from torchair.core.utils import EVENT_LEVEL, logger
    from torchair.ge_concrete_graph import ge_apis
    from torchair.ge_concrete_graph.fx2ge_converter import register_fx_node_ge_converter
    from torchair.ge_concrete_graph.ge_graph import Tensor
    from torchair.inference import cache_compile, set_dim_gears  # noqa: F401 - a package now
    from torchair.npu_fx_compiler import get_compiler, get_npu_backend

    importlib.import_module("torchair.ge_concrete_graph.ge_converter.experimental.hcom_allgather")
    assert get_npu_backend is torchair.get_npu_backend and get_compiler is torchair.get_compiler
    assert importlib.import_module("torchair.inference").__path__
    cache = importlib.import_module("torchair.inference._cache_compiler")
    assert cache.cache_compile is torchair.inference.cache_compile
    with pytest.raises(NotModeledError) as exc:
        cache.CompiledModel.load("cache.bin")
    assert exc.value.op == "torchair.inference._cache_compiler.CompiledModel.load"
    with pytest.raises(NotModeledError) as exc:
        register_fx_node_ge_converter(torch.ops.aten.add.Tensor)
    assert exc.value.op == "torchair.ge_concrete_graph.fx2ge_converter.register_fx_node_ge_converter"
    with pytest.raises(NotModeledError) as exc:
        Tensor.dtype  # noqa: B018
    assert exc.value.op == "torchair.ge_concrete_graph.ge_graph.Tensor.dtype"
    with pytest.raises(AttributeError) as exc:
        ge_apis.Add  # noqa: B018
    assert exc.value.op == "torchair.ge_concrete_graph.ge_apis.Add"
    with _CapturedLogs(logger) as records:
        logger.setLevel(EVENT_LEVEL)
        logger.event("compiled %s", "graph_1")
        logger.info("hidden")
    assert [(r.levelname, r.getMessage()) for r in records] == [("EVENT", "compiled graph_1")]


class _CapturedLogs:
    """The records one logger emits inside the block (its level restored after)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger, self.records = logger, []

    def __enter__(self) -> list[logging.LogRecord]:
        self.level = self.logger.level
        self.handler = logging.Handler()
        self.handler.emit = self.records.append
        self.logger.addHandler(self.handler)
        return self.records

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)


def test_public_names_report_torchairs_module_paths_only_under_the_shim(shim):
    import torchair as shimmed  # noqa: F401 - presents the loaded modules

    from pytest_npufuse import shim as shim_module

    assert torchair.scope.super_kernel.__module__ == "torchair.scope"
    assert torchair.CompilerConfig.__module__ == "torchair.configs.compiler_config"
    assert torchair.get_npu_backend.__module__ == "torchair.npu_fx_compiler"
    shim_module.uninstall_shims()
    try:
        assert torchair.scope.super_kernel.__module__ == "pytest_npufuse.torchair.scope"
    finally:
        shim_module.install_shims()


def test_a_tests_own_fake_npu_device_module_is_shared(tmp_path):
    """TorchAir's CPU tests rename PrivateUse1 to npu and register their own ``torch.npu``; the shim steps
    aside (their names win) and keeps streams and the backend working. Run in a fresh process: the rename
    and torch's runtime hooks cannot be undone."""
    script = tmp_path / "fake_npu.py"
    script.write_text(textwrap.dedent('''
        import types, torch, torch_npu
        fake = types.ModuleType("npu")
        fake.is_available = lambda: True
        fake.device_count = lambda: 8
        torch.utils.rename_privateuse1_backend("npu")
        torch._register_device_module("npu", fake)
        assert torch.npu is fake and torch.npu.device_count() == 8 and not hasattr(torch.npu, "mem_get_info")

        def f(a, b):
            s = torch.npu.Stream()
            e = torch.npu.Event()
            with torch.npu.stream(s):
                c = a @ b
                e.record()
            e.wait()
            return c + 1

        out = torch.compile(f, backend="npugraph_ex", fullgraph=True)(torch.ones(2, 2), torch.ones(2, 2))
        assert torch.equal(out, torch.full((2, 2), 3.0)) and torch.ones(1).is_npu
        print("shared")
    '''))
    done = subprocess.run(
        [sys.executable, "-m", "pytest_npufuse", "run", str(script)], capture_output=True, text=True, cwd=ROOT,
        timeout=600,
    )
    assert "shared" in done.stdout, done.stdout + done.stderr
    assert "1 graph(s) modeled" in done.stdout and "on 2 stream(s)" in done.stdout


# ---------------------------------------------------------------- npu_print

def test_npu_print_prints_like_numpy_in_eager_and_compiled_code(shim, capsys):
    def func(v):
        torchair.ops.npu_print("x =", v, summarize_size=1)
        torchair.ops.npu_print(v[0, :2], summarize_size=-1, tensor_detail=True)
        return v.abs()

    t = -torch.ones(4, 5, dtype=torch.bfloat16)
    func(t)
    eager = capsys.readouterr().out
    torch.compile(func, backend=torchair.get_npu_backend(), fullgraph=True)(t)
    compiled = capsys.readouterr().out
    expected = "x = [[-1 ... -1]\n ...\n [-1 ... -1]]\ntensor([-1 -1], shape=[2], dtype=torch.bfloat16)\n"
    assert eager == compiled == expected
    torchair.ops.npu_print(torch.tensor([0.5, 1 / 3]), torch.tensor(True), summarize_size=-1)
    assert capsys.readouterr().out == "[0.5 0.333333343] 1\n"
    with pytest.raises(ValueError) as exc:
        torchair.ops.npu_print(t, summarize_size=0)
    assert (exc.value.op, exc.value.argument) == ("npu_print", "summarize_size")
    with pytest.raises(TypeError) as exc:
        torchair.ops.npu_print(t, tensor_detail=1)
    assert (exc.value.op, exc.value.argument) == ("npu_print", "tensor_detail")
    with pytest.raises(ValueError) as exc:
        torchair.ops.npu_print("no tensor")
    assert exc.value.op == "npu_print"


# ---------------------------------------------------------------- dumps and save_npugraph_tensor

class _AddSub(torch.nn.Module):
    def forward(self, a, b):
        add = torch.add(a, b)
        with torchair.scope.data_dump():
            sub = torch.sub(a, b)
        return add, torch.square(sub)


def _dumped(config, tmp_path, calls=1):
    config.dump_config.enable_dump = True
    config.dump_config.dump_path = str(tmp_path)
    model = torch.compile(_AddSub(), backend=torchair.get_npu_backend(compiler_config=config), dynamic=False)
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    for _ in range(calls):
        model(a, b)
    return a, b, tmp_path / "worldsize1_global_rank0"


def test_aclgraph_data_dump_writes_every_fx_tensor_as_torchair_names_it(shim, tmp_path):
    config = torchair.CompilerConfig()
    config.mode = "npugraph_ex"
    a, b, rank = _dumped(config, tmp_path, calls=2)
    names = sorted(p.name for p in rank.iterdir())
    stems = ("add", "arg0_1", "arg1_1", "pow_1", "sub")  # the aten graph's node names (square lowers to pow)
    assert names == [f"{n}_device_0_{i}.pt" for n in stems for i in (0, 1)]
    assert torch.equal(torch.load(rank / "sub_device_0_1.pt"), a - b)
    assert torch.equal(torch.load(rank / "arg0_1_device_0_0.pt"), a)


def test_ge_data_dump_writes_the_chosen_ops_per_call(shim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = torchair.CompilerConfig()
    config.dump_config.dump_layer = " Add "
    config.dump_config.dump_mode = "output"
    config.dump_config.dump_step = "1"
    a, b, rank = _dumped(config, tmp_path, calls=2)
    (folder,) = rank.glob("*/0/graph_*/1")
    assert [p.name for p in folder.iterdir()] == ["1"]  # dump_step: the second call only
    files = sorted(p.name.split(".")[:2] for p in (folder / "1").iterdir())
    assert files == [["Add", "Add"], ["Sub", "Sub"]]  # dump_layer's Add and data_dump()'s Sub; not the Pow
    sub = torch.load(next((folder / "1").glob("Sub.*")))
    assert sub["input"] == [] and torch.equal(sub["output"][0], a - b)
    # the dump options GE is handed, as TorchAir writes them: dump_layer's names and data_dump()'s op types
    (options,) = (tmp_path / "ge_dump_data_json").glob("dump_options_worldsize1_rank0_pid*.json")
    dump = json.loads(options.read_text())["dump"]
    assert (dump["dump_mode"], dump["dump_step"], dump["dump_data"]) == ("output", "1", "tensor")
    assert dump["dump_list"][-1]["layer"] == ["Add", "Sub"]


def test_dumps_the_model_does_not_write_are_refused_by_name(shim, tmp_path):
    config = torchair.CompilerConfig()
    config.dump_config.dump_data = "stats"
    with pytest.raises(Exception) as exc:
        _dumped(config, tmp_path)
    assert exc.value.inner_exception.argument == "dump_config.dump_data"
    config = torchair.CompilerConfig()
    (tmp_path / "acl.json").write_text("{}")
    config.dump_config.dump_config_path = str(tmp_path / "acl.json")
    with pytest.raises(Exception) as exc:
        _dumped(config, tmp_path)
    assert exc.value.inner_exception.argument == "dump_config.dump_config_path"


def test_save_npugraph_tensor_counts_saves_per_path_and_keeps_a_saved_tensor_out_of_the_dump(shim, tmp_path):
    class Model(torch.nn.Module):
        def forward(self, x):
            mm = torch.mm(x, x)
            torch_npu.save_npugraph_tensor(mm, save_path=str(tmp_path / "mm.pt"))
            return torch.square(mm)

    x = torch.randn(2, 2)
    torch_npu.save_npugraph_tensor(x, save_path=str(tmp_path / "x.bin"))
    options = {"dump_tensor_data": True, "data_dump_dir": str(tmp_path)}
    model = torch.compile(Model(), backend="npugraph_ex", options=options)
    model(x)
    model(x)
    assert torch.equal(torch.load(tmp_path / "x_device_0_0.bin"), x)
    assert torch.equal(torch.load(tmp_path / "mm_device_0_1.pt"), x @ x)
    dumped = {p.name.rsplit("_device", 1)[0] for p in (tmp_path / "worldsize1_global_rank0").iterdir()}
    assert dumped == {"arg0_1", "pow_1"}  # not mm: the model saves it itself
    with pytest.raises(ValueError) as exc:
        torch_npu.save_npugraph_tensor(x, save_path=str(tmp_path / "x.npy"))
    assert (exc.value.op, exc.value.argument) == ("save_npugraph_tensor", "save_path")


# ---------------------------------------------------------------- graph dump

class _Scoped(torch.nn.Module):
    def forward(self, x, w):
        with torchair.scope.super_kernel("sp1", "stream-fusion=1"):
            y = torch.mm(x, w)
            with torchair.scope.npu_stream_switch("2"):
                z = torch.relu(y.view(-1))
        return z


def _graph_dump(kind, mode, tmp_path):
    config = torchair.CompilerConfig()
    config.mode = mode
    config.debug.graph_dump.type = kind
    config.debug.graph_dump.path = str(tmp_path)
    backend = torchair.get_npu_backend(compiler_config=config)
    torch.compile(_Scoped(), backend=backend, dynamic=False)(torch.randn(2, 3), torch.randn(3, 4))
    return list(tmp_path.iterdir())


def test_graph_dump_pbtxt_writes_the_modeled_graph_in_ges_text_form(shim, tmp_path):
    (dump,) = _graph_dump("pbtxt", "max-autotune", tmp_path)
    assert re.fullmatch(r"dynamo_original_graph_\d+_rank_0_pid_\d+_ts_\d+\.pbtxt", dump.name)
    text = dump.read_text()
    relu = text[text.index('name: "Relu"'):]
    assert 'type: "Data"' in text and 'input: "MatMulV3:0"' in relu  # the view reads the mm's memory
    assert 'attr { key: "_user_stream_label" value { s: "2" } }' in relu
    assert 'attr { key: "_super_kernel_options" value { s: "stream-fusion=1" } }' in relu
    assert "shape { dim: 8 }" in relu and text.rstrip().endswith('input: "Relu:0"\n}')


class _NzWeight(torch.nn.Module):
    """A weight cast to FRACTAL_NZ once, as inference scripts do (``npu_format_cast(w, 29)``)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch_npu.npu_format_cast(torch.randn(32, 64), 29), requires_grad=False)

    def forward(self, x):
        return torch.mm(x, self.w)


def test_graph_dump_records_an_nz_weights_format(shim, tmp_path):
    config = torchair.CompilerConfig()
    config.debug.graph_dump.type = "pbtxt"
    config.debug.graph_dump.path = str(tmp_path)
    torch._dynamo.reset()
    model = _NzWeight()
    assert torch_npu.get_npu_format(model.w) == 29
    torch.compile(model, backend=torchair.get_npu_backend(compiler_config=config), dynamic=False)(torch.randn(16, 32))
    (dump,) = tmp_path.iterdir()
    data = {op.split('name: "', 1)[1].split('"', 1)[0]: op for op in dump.read_text().split("op {")[1:] if 'type: "Data"' in op}
    layouts = sorted(op.split('layout: "', 1)[1].split('"', 1)[0] for op in data.values())
    assert layouts == ["FRACTAL_NZ", "ND"]  # the weight, and the activation x
    (nz,) = [op for op in data.values() if "FRACTAL_NZ" in op]
    assert "dim: 32 dim: 64" in nz


def test_graph_dump_of_a_dynamic_shape_graph_lists_its_size_inputs(shim, tmp_path):
    config = torchair.CompilerConfig()
    config.debug.graph_dump.type = "txt"
    config.debug.graph_dump.path = str(tmp_path)
    torch._dynamo.reset()
    model = torch.compile(_AddMm(), backend=torchair.get_npu_backend(compiler_config=config), dynamic=True)
    model(torch.randn(3, 5), torch.randn(5, 3))
    (dump,) = tmp_path.iterdir()
    data = [op for op in dump.read_text().split("op {")[1:] if 'type: "Data"' in op]
    assert dump.suffix == ".txt" and len(data) > 2  # the symbolic sizes, then x and y
    # The symbolic sizes are int64 Data ops fed from the host (TorchAir's sym inputs), then x and y.
    assert ["DT_INT64" in op for op in data] == [True] * (len(data) - 2) + [False, False]
    assert all("DT_FLOAT" in op for op in data[-2:])


def test_graph_dump_types_a_mode_cannot_write_are_refused(shim, tmp_path):
    """The aclgraph modes ignore the model's super_kernel scope, and say so."""
    with pytest.warns(ScopeIgnoredWarning, match="ignored in npugraph_ex mode"):
        (dump,) = _graph_dump("py", "npugraph_ex", tmp_path)
    assert dump.name.startswith("dynamo_optimized_graph_") and "torch.ops.aten.mm.default" in dump.read_text()
    assert "code: " in dump.read_text()  # TorchAir writes print_readable: each node with its source line
    with pytest.warns(ScopeIgnoredWarning, match="ignored in reduce-overhead mode"):
        with pytest.warns(DeprecationWarning, match='"reduce-overhead" mode configuration will be deprecated'):
            with pytest.raises(Exception) as exc:
                _graph_dump("pbtxt", "reduce-overhead", tmp_path)
    # TorchAir's own words for the aclgraph modes, ours for max-autotune; both name the option
    assert exc.value.inner_exception.problem.startswith("Graph dump for aclGraph only support 'py' type, but got: pbtxt")
    assert exc.value.inner_exception.argument == "config.debug.graph_dump.type"
    with pytest.raises(Exception) as exc:
        _graph_dump("py", "max-autotune", tmp_path)
    assert exc.value.inner_exception.argument == "config.debug.graph_dump.type"


# ---------------------------------------------------------------- what the FX compilers log

@pytest.mark.parametrize("backend_name", ["torchair", "npugraph_ex"])
def test_compiles_and_calls_are_logged_to_the_backends_logger_as_torchair_logs_them(shim, backend_name):
    """TorchAir's and npugraph_ex's FX compilers log each compile (INFO: inputs and graph; DEBUG: the
    optimised graph) and each call of a compiled graph (DEBUG: its inputs and outputs) to their own
    loggers; scripts and TorchAir's tests read them with ``assertLogs(logger, level="DEBUG")``."""
    import npugraph_ex

    log = logging.getLogger(backend_name)
    backend = torchair.get_npu_backend() if backend_name == "torchair" else npugraph_ex.get_npu_backend()
    compiled = torch.compile(lambda x: x * 2, backend=backend, dynamic=False)
    before = log.level
    log.setLevel(logging.DEBUG)
    try:
        with unittest.TestCase().assertLogs(log, level="DEBUG") as seen:
            compiled(torch.ones(2, 3))
            compiled(torch.ones(2, 3))
    finally:
        log.setLevel(before)
    messages = [record.getMessage() for record in seen.records]
    assert messages[0] == "compiler inputs" and "aten.mul.Tensor" in messages[2]
    assert messages[3].startswith("after fx graph optimization, graph is graph():")
    assert messages.count("runtime inputs") == 2 and messages.count("runtime outputs") == 2
    assert "  input 0: <class 'torch.Tensor'>(torch.Size([2, 3]), torch.float32, contiguous=True)" in messages
