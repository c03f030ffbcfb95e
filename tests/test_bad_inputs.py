"""The bad-input table: one row per input a user can get wrong, and the message it must produce.

Each row is (what was given, how it is given to the library, a pattern the error must match). Every
error must be a pytest-npufuse error (never a raw torch or Python traceback) whose message names the
problem and the fix. Library-level calls keep the table fast; command-line and ini rows run in one
in-process pytest session each (no model is compiled there).
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

from pytest_npufuse import compare, torchair
from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.errors import NpufuseError
from pytest_npufuse.files.atomic import check_outputs, write_text_atomic
from pytest_npufuse.gate import baseline
from pytest_npufuse.gate.expectations import parse_multistream, parse_npu_target, parse_superkernel, parse_superkernels
from pytest_npufuse.plan.options import parse_options
from pytest_npufuse.plan.tasks import LogRecord
from pytest_npufuse.report.plog import write_plog
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import builtin_profile_text, load_profile
from pytest_npufuse.target.userconfig import user_config_from_table

Action = Callable[[Path], Any]


def profile_with(line: str, replacement: str) -> Action:
    """Load a copy of the built-in a3 profile with the first ``key = value`` line of ``line``'s key
    replaced (whatever value the shipped profile has: a fit may move it), or a ``[section]`` header."""
    key = line.split("=")[0].strip()
    pattern = rf"^{re.escape(key)} = \S+" if "=" in line else rf"^{re.escape(line)}"

    def load(tmp: Path) -> Any:
        path = tmp / "custom.toml"
        text, count = re.subn(pattern, replacement, builtin_profile_text("a3"), count=1, flags=re.M)
        assert count == 1, line
        path.write_text(text)
        return load_profile(str(path))

    return load


def op_entry(**keys: Any) -> Action:
    """Load the catalog with one user op entry."""
    entry = {"engine": "vector", "fusable": True, "sync_all": False, "block_dim": 1, **keys}
    entry = {key: value for key, value in entry.items() if value is not None}
    return lambda tmp: load_catalog({"acc::my_op": entry}, "pyproject.toml [tool.npufuse.ops]")


def baseline_file(text: str) -> Action:
    def load(tmp: Path) -> Any:
        path = tmp / "baseline.json"
        path.write_text(text)
        return baseline.load_baseline(path)

    return load


def compare_cli(*argv: str, files: dict[str, str] | None = None) -> Action:
    """Run ``python -m pytest_npufuse`` in process; the files are written first, relative to tmp."""

    def run(tmp: Path) -> Any:
        for name, text in (files or {}).items():
            (tmp / name).write_text(text)
        return cli([arg.replace("TMP", str(tmp)) for arg in argv])

    return run


GOOD_BASELINE = (
    '{"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 1, "model_version": null, "model": null, '
    '"entries": {}}'
)


def entry_file(**override: Any) -> Action:
    good = {"mode": "max-autotune", "baseline_us": 10.0, "variant_us": 9.0, "speedup": 1.1, "segments": 1,
            "streams": 1, "model_version": "x"}
    entry = {**good, **override}
    import json

    text = json.dumps({"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 1, "model_version": None,
                       "model": None, "entries": {"t::a": {"a3": entry}}})
    return baseline_file(text)


def model_call(model: Any, *inputs: Any, **kwargs: Any) -> Action:
    return lambda tmp: compare(model, *inputs, **kwargs)


def read_only_file(tmp: Path) -> Any:
    path = tmp / "baseline.json"
    path.write_text(GOOD_BASELINE)
    path.chmod(0o444)
    write_text_atomic(path, "new")


def two_outputs_via_symlink(tmp: Path) -> Any:
    (tmp / "real.json").write_text(GOOD_BASELINE)
    (tmp / "link.json").symlink_to(tmp / "real.json")
    check_outputs({"--npufuse-baseline": tmp / "real.json", "--npufuse-json": tmp / "link.json"})


def plog_dir_is_a_file(tmp: Path) -> Any:
    (tmp / "plogfile").write_text("")
    os.environ["ASCEND_PROCESS_LOG_PATH"] = str(tmp / "plogfile")
    write_plog([LogRecord("WARNING", "super_kernel_scope", "x")])


# ----------------------------------------------------------------------------- models
class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class NoOutput(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1"):
            x * 2
        return None


class RandomNoise(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


class Shapes(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class UnboundedSize(torch.nn.Module):
    def forward(self, x):
        return torch.zeros(int(x.max().item())) + 1


class RepeatsTensor(torch.nn.Module):
    def forward(self, x):
        return torch.repeat_interleave(x.reshape(-1), torch.full((x.numel(),), 3))


class ValueBranch(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1"):
            if x.sum() > 0:
                return x * 2
            return x * 3


class EmptyScopeOptions(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1", "feed-sync-all=1"):
            y = x.view(-1)
        return x * 2 + y.sum()


class SecondUseOptions(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1", "feed-sync-all=1"):
            y = x * 2
        with torchair.scope.super_kernel("sp1", "stream-fusion=1"):
            return y + 1


class TooManyCores(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.limit_core_num(1000, 1000):
            return x @ x


class ZeroCores(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.limit_core_num(0, 8):
            return x @ x


class ScopeWithoutWith(torch.nn.Module):
    def forward(self, x):
        torchair.scope.super_kernel("sp1", "feed-sync-all=1")
        return x @ x


class KeepAliveUnknownStream(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        with torchair.scope.npu_stream_switch("1"):
            z = y + 1
        torchair.ops.npu_record_tagged_stream(y, "7")
        return z


class BadOption(torch.nn.Module):
    def __init__(self, options: str) -> None:
        super().__init__()
        self.options = options

    def forward(self, x):
        with torchair.scope.super_kernel("sp1", self.options):
            return x * 2 + 1


class WaitOnInt(torch.nn.Module):
    def forward(self, x):
        torchair.ops.wait([3])
        return x * 2


def _reference_returns_two(x):
    return x * 2, x * 3


def _model_returns_one(x):
    return x * 2


X = torch.ones(4, 4)

# ----------------------------------------------------------------------------- the table
ROWS: list[tuple[str, str, Action, str]] = [
    # options strings (parsed eagerly; the scope is named)
    ("options", "feed-sync-all=2", lambda t: parse_options("sp1", "feed-sync-all=2"), r"'sp1'.*feed-sync-all='2' is not allowed; feed-sync-all use one of 0, 1"),
    ("options", "stream-fusion=yes", lambda t: parse_options("sp1", "stream-fusion=yes"), r"stream-fusion='yes' is not allowed"),
    ("options", "strict-scope-check=warn", lambda t: parse_options("sp1", "strict-scope-check=warn"), r"strict-scope-check='warn'.*bypass, abort"),
    ("options", "feed-sync-all= (no value)", lambda t: parse_options("sp1", "feed-sync-all="), r"key-value pair is missing for the option 'feed-sync-all='"),
    ("options", "misspelt key feed-sync=1", lambda t: parse_options("sp1", "feed-sync=1"), r"unknown option 'feed-sync'.*Did you mean 'feed-sync-all'"),
    ("options", "key given twice", lambda t: parse_options("sp1", "feed-sync-all=1:feed-sync-all=0"), r"feed-sync-all option has been set \(given twice in"),
    ("options", "debug-aic-num=x", lambda t: parse_options("sp1", "debug-aic-num=x"), r"debug-aic-num='x' is not allowed; debug-aic-num must be a non-negative core count"),
    ("options", "dcci list with empty item", lambda t: parse_options("sp1", "dcci-before-kernel-start=A,,B"), r"must be a comma list of op types"),
    ("options", "=1 (empty key)", lambda t: parse_options("sp1", "=1"), r"'sp1'"),
    ("options", "options on a scope with no kernel", model_call(EmptyScopeOptions(), X), r"super_kernel\('sp1', 'feed-sync-all=1'\) at .*test_bad_inputs.py:\d+ encloses no kernel"),
    ("options", "other options on a scope's second use", model_call(SecondUseOptions(), X), r"'stream-fusion=1'\) at .*test_bad_inputs.py:\d+ passes other options than the first use"),
    ("options", "bad option reaches the plan", model_call(BadOption("feed-sync-all=3"), X), r"scope 'sp1'.*feed-sync-all='3'"),
    # scope names and scope arguments
    ("scope", "super_kernel('')", lambda t: torchair.scope.super_kernel(""), r"ambiguous; pass a name"),
    ("scope", "super_kernel(3)", lambda t: torchair.scope.super_kernel(3), r"takes a str or None, got 3"),
    ("scope", "super_kernel('sp1', options=None)", lambda t: torchair.scope.super_kernel("sp1", None), r"takes a str like"),
    ("scope", "npu_stream_switch('')", lambda t: torchair.scope.npu_stream_switch(""), r"non-empty str"),
    ("scope", "npu_stream_switch(1)", lambda t: torchair.scope.npu_stream_switch(1), r"non-empty str such as '1', got 1"),
    ("scope", "npu_stream_switch('1', 'high')", lambda t: torchair.scope.npu_stream_switch("1", "high"), r"stream_priority=...\) takes an int"),
    ("scope", "limit_core_num(-1, 2)", lambda t: torchair.scope.limit_core_num(-1, 2), r"op_aicore_num=...\) takes a non-negative int"),
    ("scope", "limit_core_num(4, 2.5)", lambda t: torchair.scope.limit_core_num(4, 2.5), r"op_vectorcore_num=...\) takes a non-negative int, got 2.5"),
    ("scope", "super_kernel('sp1') without with", model_call(ScopeWithoutWith(), X), r"super_kernel\(...\) at .*test_bad_inputs.py:\d+ is called but not entered.*use it as a with block"),
    ("scope", "limit_core_num(1000, 1000)", model_call(TooManyCores(), X), r"op_aicore_num=1000 is outside 1..24.*a3"),
    ("scope", "limit_core_num(0, 8)", model_call(ZeroCores(), X), r"limit_core_num\(0, 8\) around aten::mm at .*test_bad_inputs.py:\d+: op_aicore_num=0 is outside 1..24"),
    # markers
    ("marker", "superkernel() without scope", lambda t: parse_superkernel((), {}), r"needs scope='<name>'"),
    ("marker", "superkernel('a', 'b')", lambda t: parse_superkernel(("a", "b"), {}), r"takes one positional argument"),
    ("marker", "superkernel(scope=3)", lambda t: parse_superkernel((), {"scope": 3}), r"needs scope='<name>'.*got 3"),
    ("marker", "superkernel(outcome='fuse')", lambda t: parse_superkernel(("s",), {"outcome": "fuse"}), r"outcome='fuse' is not one of fused"),
    ("marker", "superkernel(segment=1) misspelt", lambda t: parse_superkernel(("s",), {"segment": 1}), r"unknown argument 'segment'. Did you mean 'segments'"),
    ("marker", "superkernel(segments=-1)", lambda t: parse_superkernel(("s",), {"segments": -1}), r"segments=-1 must be an integer >= 0"),
    ("marker", "superkernel(segments=1.5)", lambda t: parse_superkernel(("s",), {"segments": 1.5}), r"segments=1.5 must be an integer"),
    ("marker", "superkernel(min_speedup=nan)", lambda t: parse_superkernel(("s",), {"min_speedup": math.nan}), r"min_speedup=nan must be a finite number"),
    ("marker", "superkernel(min_speedup=inf)", lambda t: parse_superkernel(("s",), {"min_speedup": math.inf}), r"min_speedup=inf must be a finite number"),
    ("marker", "superkernel(min_speedup='2')", lambda t: parse_superkernel(("s",), {"min_speedup": "2"}), r"min_speedup='2' must be a finite number"),
    ("marker", "superkernel(outcome='unfused', segments=1)", lambda t: parse_superkernel(("s",), {"outcome": "unfused", "segments": 1}), r"outcome='unfused' forms no SuperKernel, so segments=1 can never hold"),
    ("marker", "superkernel(outcome='bypassed', segments=2)", lambda t: parse_superkernel(("s",), {"outcome": "bypassed", "segments": 2}), r"outcome='bypassed' forms no SuperKernel"),
    ("marker", "superkernel(segments=0) expecting fused", lambda t: parse_superkernel(("s",), {"segments": 0}), r"outcome='fused' forms at least one segment, so segments=0"),
    ("marker", "superkernel(breaks='add')", lambda t: parse_superkernel(("s",), {"breaks": "add"}), r"breaks='add' must be a list of op types written 'namespace::name'"),
    ("marker", "superkernel(options=1)", lambda t: parse_superkernel(("s",), {"options": 1}), r"options=1 must be a string"),
    ("marker", "two superkernel markers on one scope", lambda t: parse_superkernels([(("s",), {}), (("s",), {"segments": 2})]), r"two superkernel markers for scope 's'; merge them"),
    ("marker", "multistream(2)", lambda t: parse_multistream((2,), {}), r"keyword arguments only"),
    ("marker", "multistream(stream=2) misspelt", lambda t: parse_multistream((), {"stream": 2}), r"unknown argument 'stream'. Did you mean 'streams'"),
    ("marker", "multistream(streams=0)", lambda t: parse_multistream((), {"streams": 0}), r"streams=0 must be an integer >= 1"),
    ("marker", "multistream(race_free='no')", lambda t: parse_multistream((), {"race_free": "no"}), r"race_free='no' must be True or False"),
    ("marker", "multistream(min_speedup=nan)", lambda t: parse_multistream((), {"min_speedup": math.nan}), r"min_speedup=nan must be a finite number"),
    ("marker", "npu_target('A3')", lambda t: parse_npu_target(("A3",), ("a2", "a3")), r"'A3' is not a known target \(a2, a3\); did you mean 'a3'\?"),
    ("marker", "npu_target('a5')", lambda t: parse_npu_target(("a5",), ("a2", "a3")), r"'a5' is not a known target"),
    ("marker", "npu_target()", lambda t: parse_npu_target((), ("a3",)), r"needs target names"),
    ("marker", "npu_target(3)", lambda t: parse_npu_target((3,), ("a3",)), r"needs target names.*got \(3,\)"),
    # profile TOML
    ("profile", "cube_mhz = nan", profile_with("cube_mhz = 1850", "cube_mhz = nan"), r"\[clock\]: key 'cube_mhz' is nan, expected more than zero \(finite\)"),
    ("profile", "hbm_gbps = inf", profile_with("hbm_gbps = 1600.0", "hbm_gbps = inf"), r"\[memory\]: key 'hbm_gbps' is inf"),
    ("profile", "kernel_head = -inf", profile_with("kernel_head = 2.0", "kernel_head = -inf"), r"key 'kernel_head' is -inf, expected zero or more"),
    ("profile", "sk_sync = nan", profile_with("sk_sync = 1.5", "sk_sync = nan"), r"key 'sk_sync' is nan"),
    ("profile", "efficiency compute = 5.0", profile_with("compute = 0.7", "compute = 5.0"), r"\[efficiency\]: key 'compute' is 5.0, expected a number in \(0, 1\]"),
    ("profile", "comm efficiency = 0", profile_with("efficiency = 0.7", "efficiency = 0"), r"\[comm\]: key 'efficiency' is 0.0, expected a number in \(0, 1\]"),
    ("profile", "aic = 0", profile_with("aic = 24", "aic = 0"), r"key 'aic' is 0, expected more than zero"),
    ("profile", "aiv = -48", profile_with("aiv = 48", "aiv = -48"), r"key 'aiv' is -48"),
    ("profile", "aic = 24.5", profile_with("aic = 24", "aic = 24.5"), r"key 'aic' is 24.5, expected an integer"),
    ("profile", "misspelt key aic_num", profile_with("aic = 24", "aic_num = 24"), r"missing key 'aic'"),
    ("profile", "unknown section", profile_with("[clock]", "[clocks]"), r"(unknown section \[clocks\]|missing key 'clock')"),
    ("profile", "not TOML", profile_with("[cores]", "[cores"), r"not valid TOML.*line"),
    ("profile", "misspelt [tool.npufuse.target]", lambda t: user_config_from_table({"target": {"a3": {}}}, "pyproject.toml"), r"unknown table \[tool.npufuse.target\]; did you mean \[tool.npufuse.targets\]"),
    ("profile", "[tool.npufuse.targets] not a table", lambda t: user_config_from_table({"targets": 3}, "pyproject.toml"), r"\[tool.npufuse.targets\] must be a table"),
    ("profile", "base = 'a9'", lambda t: user_config_from_table({"targets": {"b4": {"base": "a9"}}}, "pyproject.toml"), r"key 'base' is 'a9', expected one of 910b1, 910b2, 910b3, 910b4, 910c, a2, a3"),
    ("profile", "unknown target name", lambda t: load_profile("a5"), r"unknown NPU target 'a5'"),
    # op TOML
    ("op", "block_dim = 0", op_entry(block_dim=0), r"\[\"acc::my_op\"\]: block_dim 0 must be at least 1"),
    ("op", "block_dim = -4", op_entry(block_dim=-4), r"block_dim -4 must be at least 1"),
    ("op", "block_dim = 'many'", op_entry(block_dim="many"), r"block_dim 'many' is not an integer or one of"),
    ("op", "engine = 'gpu'", op_entry(engine="gpu"), r"engine 'gpu' is not one of cube, vector"),
    ("op", "fusable = 'yes'", op_entry(fusable="yes"), r"key 'fusable' is 'yes', expected a boolean"),
    ("op", "missing sync_all", op_entry(sync_all=None), r"missing key 'sync_all'"),
    ("op", "flops_per_element = nan", op_entry(flops="elementwise", flops_per_element=math.nan), r"flops_per_element nan must be a finite number"),
    ("op", "unknown key fuseable", op_entry(fuseable=True), r"unknown key 'fuseable'"),
    ("op", "op name without namespace", lambda t: load_catalog({"my_op": {}}, "pyproject.toml"), r"op type 'my_op' must be written 'namespace::name'"),
    # baseline and report files
    ("baseline", "corrupt JSON", baseline_file("{not json"), r"corrupt JSON \(.* at line 1 column 2 \(byte 1\)\).* the file was left untouched"),
    ("baseline", "a JSON list", baseline_file("[]"), r"not a pytest-npufuse baseline or run report"),
    ("baseline", "another tool's JSON", baseline_file('{"tool": "other"}'), r"not a pytest-npufuse baseline"),
    ("baseline", "schema_version 99", baseline_file(GOOD_BASELINE.replace('"schema_version": 1', '"schema_version": 99')), r"schema_version 99, but this pytest-npufuse reads schema_version 1"),
    ("baseline", "a run report as baseline", baseline_file(GOOD_BASELINE.replace('"baseline"', '"run"')), r"is a pytest-npufuse run report, not a baseline"),
    ("baseline", "entries = []", baseline_file(GOOD_BASELINE.replace('"entries": {}', '"entries": []')), r"'entries' must be an object"),
    ("baseline", "entry variant_us = -1", entry_file(variant_us=-1), r"'variant_us' is -1, expected a positive number"),
    ("baseline", "entry segments = 1.5", entry_file(segments=1.5), r"'segments' is 1.5, expected an integer >= 0"),
    ("baseline", "entry without mode", entry_file(mode=None), r"'mode' is None, expected a string"),
    ("baseline", "binary file", lambda t: (t / "b.json").write_bytes(b"\xff\xfe\x00") and baseline.load_baseline(t / "b.json"), r"not UTF-8 text: byte 0 \(line 1\) is 0xff"),
    ("baseline", "a directory", lambda t: (t / "d.json").mkdir() or baseline.load_baseline(t / "d.json"), r"is a directory"),
    ("baseline", "read-only file to replace", read_only_file, r"baseline.json: the file is read-only, so it was not replaced"),
    ("baseline", "two outputs, one through a symlink", two_outputs_via_symlink, r"--npufuse-baseline and --npufuse-json are the same file"),
    ("baseline", "output under a file", lambda t: (t / "f").write_text("x") and check_outputs({"--npufuse-json": t / "f" / "b.json"}), r"is a file, not a directory"),
    ("baseline", "ASCEND_PROCESS_LOG_PATH is a file", plog_dir_is_a_file, r"ASCEND_PROCESS_LOG_PATH .*plogfile is a file.*point ASCEND_PROCESS_LOG_PATH at a directory"),
    # CLI arguments
    ("cli", "compare with a missing file", compare_cli("compare", "TMP/none.json", "TMP/none2.json"), r"file not found|No such file"),
    ("cli", "compare --fail-above=-1", compare_cli("compare", "a", "b", "--fail-above=-1"), r"'-1' is not a percentage >= 0"),
    ("cli", "compare --fail-above=nan", compare_cli("compare", "a", "b", "--fail-above=nan"), r"'nan' is not a percentage >= 0"),
    ("cli", "compare with one file", compare_cli("compare", "a"), r"give at least two files, oldest first"),
    ("cli", "unknown command", compare_cli("comapre"), r"invalid choice: 'comapre'"),
    ("cli", "advise a module that does not exist", compare_cli("advise", "no_such_module_here:factory"), r"no module named 'no_such_module_here'.*give a .py file path"),
    ("cli", "advise a spec without FACTORY", compare_cli("advise", "cases/decoder_layers.py"), r"is not MODULE_OR_FILE:FACTORY"),
    ("cli", "run a script that does not exist", compare_cli("run", "TMP/none.py"), r"no such script"),
    ("cli", "compare a corrupt file", compare_cli("compare", "TMP/x.json", "TMP/x.json", files={"x.json": "{"}), r"corrupt JSON"),
    # model shapes, inputs and outputs
    ("model", "a missing input", model_call(Add(), X), r"Add.forward\(x, y\) cannot take the 1 input\(s\) given: missing a required argument: 'y'"),
    ("model", "too many inputs", model_call(Add(), X, X, X), r"cannot take the 3 input\(s\) given: too many positional arguments"),
    ("model", "the class, not an instance", model_call(Add, X, X), r"got the class Add, not a model; pass an instance, e.g. check\(Add\(\), \*inputs\)"),
    ("model", "outputs are None", model_call(NoOutput(), X), r"the model returns no tensor.*return the tensors it computes"),
    ("model", "a random op in forward", model_call(RandomNoise(), X), r"aten::rand_like at .*test_bad_inputs.py:\d+ draws random numbers"),
    ("model", "mismatched matmul shapes", model_call(Shapes(), torch.ones(2, 3), torch.ones(4, 5)), r"at .*test_bad_inputs.py:\d+"),
    ("model", "reference returns another structure", model_call(_model_returns_one, X, reference=_reference_returns_two), r"the reference returns 2 outputs but the model returns 1"),
    ("model", "host=3", model_call(Add(), X, X, host=3), r"host=3 must be a HostConfig, e.g. host=HostConfig\(threads=3\)"),
    ("model", "HostConfig(threads=0)", lambda t: HostConfig(threads=0), r"HostConfig\(threads=0\): threads is MAX_RUNTIME_CORE_NUMBER, an int from 1 to"),
    ("model", "HostConfig(threads=True)", lambda t: HostConfig(threads=True), r"HostConfig\(threads=True\)"),
    ("model", "HostConfig(tiling_cache='no')", lambda t: HostConfig(tiling_cache="no"), r"tiling_cache='no'\): tiling_cache is True or False"),
    ("model", "unknown target string", model_call(Add(), X, X, target="a33"), r"unknown NPU target 'a33'"),
    # stream and event misuse
    ("stream", "wait([])", lambda t: torchair.ops.wait([]), r"requires at least one tensor input"),
    ("stream", "wait([3]) inside a model", model_call(WaitOnInt(), X), r"takes tensors only, got \[.int.\] \(at .*test_bad_inputs.py:\d+\)"),
    ("stream", "npu_create_tagged_event('')", lambda t: torchair.ops.npu_create_tagged_event(""), r"takes a non-empty str"),
    ("stream", "npu_tagged_event_record(not an event)", lambda t: torchair.ops.npu_tagged_event_record("e1"), r"tagged event 'e1' is not in use; create it with npu_create_tagged_event"),
    ("stream", "npu_tagged_event_wait(not an event)", lambda t: torchair.ops.npu_tagged_event_wait(object()), r"npu_tagged_event_wait: tagged event .* is not in use"),
    ("stream", "npu_record_tagged_stream(t, '')", lambda t: torchair.ops.npu_record_tagged_stream(X, ""), r"takes a stream tag str"),
    ("stream", "npu_record_tagged_stream on a stream that does not exist", model_call(KeepAliveUnknownStream(), X, mode="reduce-overhead"), r"npu_record_tagged_stream\(..., '7'\) at .*test_bad_inputs.py:\d+: no op runs on a stream '7'"),
    ("stream", "npu_wait_tensor(1, 2)", lambda t: torchair.scope.npu_wait_tensor(1, 2), r"takes two tensors"),
    # value-dependent ops
    ("value", "a size from .item() with no bound", model_call(UnboundedSize(), X), r"aten::zeros at .*test_bad_inputs.py:\d+ has a size that depends on tensor values .* no upper bound"),
    ("value", "repeat_interleave with a repeats tensor and no output_size", model_call(RepeatsTensor(), X),
     r"aten::repeat_interleave at .*test_bad_inputs.py:\d+ has a size that depends on tensor values .* pass output_size="),
    ("value", "a branch on a tensor's value in a scope", model_call(ValueBranch(), X), r"test_bad_inputs.py:\d+"),
]


def _message(action: Action, tmp: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The error ``action`` gives: an NpufuseError's diagnosis, or what the command line printed when it
    exited non-zero. Anything else (a raw exception, or no error at all) fails the row."""
    try:
        code = action(tmp)
    except NpufuseError as exc:
        return exc.diagnosis
    except SystemExit as exc:
        assert exc.code not in (0, None), "the command exited 0"
        return capsys.readouterr().err
    assert isinstance(code, int) and not isinstance(code, bool) and code != 0, f"no error; returned {code!r}"
    return capsys.readouterr().err


@pytest.mark.parametrize(("kind", "given", "action", "pattern"), ROWS, ids=[f"{kind}: {given}" for kind, given, _, _ in ROWS])
def test_bad_input_gives_a_clear_error(kind, given, action, pattern, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(tmp_path / "plog"))
    message = _message(action, tmp_path, capsys)
    assert re.search(pattern, message, re.S), message
    assert "Traceback" not in message


# ----------------------------------------------------------------------------- command line and ini values
# (given, command-line arguments, ini text, extra files, the pattern the usage error must match). Each
# row is one in-process pytest session that stops at configure, before any model is compiled.
NAN_PROFILE = '[tool.npufuse.targets.a3.clock]\ncube_mhz = nan\n'
CONFIG_ROWS: list[tuple[str, tuple[str, ...], str, dict[str, str], str]] = [
    ("--npu-target= (empty)", ("--npu-target=",), "", {}, r"--npu-target= is empty"),
    ("--npu-target=a5", ("--npu-target=a5",), "", {}, r"unknown NPU target 'a5'"),
    ("--npu-target=a3,,a2", ("--npu-target=a3,,a2",), "", {}, r"empty target name"),
    ("--npu-target=a3,a3", ("--npu-target=a3,a3",), "", {}, r"'a3' is target 'a3' again; give each target once"),
    ("--npufuse-tolerance without a baseline", ("--npufuse-tolerance=5",), "", {}, r"--npufuse-tolerance needs --npufuse-baseline FILE"),
    ("ini npufuse_tolerance without a baseline", (), "npufuse_tolerance = 5\n", {}, r"--npufuse-tolerance needs --npufuse-baseline"),
    ("--npufuse-tolerance=abc", ("--npufuse-baseline=b.json", "--npufuse-tolerance=abc"), "", {}, r"'abc' is not a percentage >= 0"),
    ("--npufuse-tolerance=nan", ("--npufuse-baseline=b.json", "--npufuse-tolerance=nan"), "", {}, r"'nan' is not a percentage"),
    ("--npufuse-baseline= (empty)", ("--npufuse-baseline=",), "", {}, r"--npufuse-baseline= is empty; give a path"),
    ("--npufuse-json= (empty)", ("--npufuse-json=",), "", {}, r"--npufuse-json= is empty"),
    ("--npufuse-update-baseline without a baseline", ("--npufuse-update-baseline",), "", {}, r"needs --npufuse-baseline FILE: the file to rewrite"),
    ("ini npufuse_update_baseline = maybe", (), "npufuse_update_baseline = maybe\n", {}, r"ini key npufuse_update_baseline = 'maybe' is not a boolean; use true or false"),
    ("baseline and JSON report on one path", ("--npufuse-baseline=x.json", "--npufuse-json=x.json"), "", {}, r"--npufuse-baseline and --npufuse-json are the same file"),
    ("JSON and HTML report on one path", ("--npufuse-json=r.out", "--npufuse-html=r.out"), "", {}, r"--npufuse-json and --npufuse-html are the same file"),
    ("update a read-only baseline", ("--npufuse-baseline=ro.json", "--npufuse-update-baseline"), "", {"ro.json": GOOD_BASELINE}, r"ro.json: the file is read-only, so it was not replaced"),
    ("--npufuse-json is a directory", ("--npufuse-json=sub",), "", {"sub/keep": ""}, r"--npufuse-json sub: is a directory"),
    ("--npufuse-trace-dir is a file", ("--npufuse-trace-dir=t.txt",), "", {"t.txt": ""}, r"--npufuse-trace-dir t.txt: is a file"),
    ("--npufuse-baseline is corrupt", ("--npufuse-baseline=c.json",), "", {"c.json": "{"}, r"--npufuse-baseline: .*corrupt JSON"),
    ("--npufuse-profile missing", ("--npufuse-profile=none.toml",), "", {}, r"none.toml: file not found"),
    ("pyproject [tool.npufuse.target.a3]", (), "", {"pyproject.toml": "[tool.npufuse.target.a3.cores]\naic = 2\n"}, r"unknown table \[tool.npufuse.target\]; did you mean \[tool.npufuse.targets\]"),
    ("pyproject profile cube_mhz = nan", (), "", {"pyproject.toml": NAN_PROFILE}, r"key 'cube_mhz' is nan"),
]


@pytest.mark.parametrize(("given", "args", "ini", "files", "pattern"), CONFIG_ROWS, ids=[row[0] for row in CONFIG_ROWS])
def test_bad_setting_stops_the_run_with_a_usage_error(given, args, ini, files, pattern, pytester):
    for name, text in files.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(text)
    if "ro.json" in files:
        (pytester.path / "ro.json").chmod(0o444)
    if ini:
        pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    errors = result.stderr.str()
    assert re.search(pattern, errors), errors
    assert "Traceback" not in errors


MARKER_CASES = '''
import pytest, torch
from pytest_npufuse import torchair


@pytest.mark.npu_target("A3")
def test_upper_case_target(npu_target):
    pass


@pytest.mark.superkernel(scope="sp1")
def test_marker_but_no_check(npufuse):
    pass


@pytest.mark.superkernel(scope="sp1")
@pytest.mark.superkernel(scope="sp1", segments=2)
def test_two_markers_on_one_scope(npufuse):
    pass


@pytest.mark.superkernel(scope="sp1", outcome="unfused", segments=1)
def test_contradiction(npufuse):
    pass


@pytest.mark.superkernel(scope="sp1", min_speedup=float("nan"))
def test_nan_speedup(npufuse):
    pass
'''

# (test, the pattern its failure must show): the marker rows, one grouped session.
MARKER_ROWS = [
    ("test_upper_case_target", r"'A3' is not a known target \(910b1, 910b2, 910b3, 910b4, 910c, a2, a3\); did you mean 'a3'\?"),
    ("test_marker_but_no_check", r"has superkernel/multistream markers but never called npufuse.check\(\)"),
    ("test_two_markers_on_one_scope", r"two superkernel markers for scope 'sp1'; merge them"),
    ("test_contradiction", r"outcome='unfused' forms no SuperKernel, so segments=1 can never hold"),
    ("test_nan_speedup", r"min_speedup=nan must be a finite number"),
]


def test_bad_markers_fail_their_tests_with_the_reason(pytester):
    pytester.makepyfile(MARKER_CASES)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(errors=len(MARKER_ROWS) - 1, failed=1)  # markers are parsed at set-up
    output = result.stdout.str()
    for test, pattern in MARKER_ROWS:
        section = output.split(f" {test} ")[1].split("\n_")[0]
        assert re.search(pattern, section), section
    assert "torch.__trace" not in output and "Traceback" not in output


def _file_table() -> Any:
    """tests/files/test_bad_files.py, the table of files given to every reader and writer."""
    import importlib.util

    folder = Path(__file__).parent / "files"
    if str(folder) not in sys.path:  # it imports its helpers (special.py) from beside it, as pytest lets it
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("npufuse_bad_files_table", folder / "test_bad_files.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_tables_have_at_least_200_rows_over_every_class_of_input():
    files = _file_table()
    assert len(ROWS) + len(CONFIG_ROWS) + len(MARKER_ROWS) + len(files.ROWS) + len(files.SAFE_ROWS) >= 200
    assert {kind for kind, *_ in ROWS} >= {"options", "scope", "marker", "profile", "op", "baseline", "cli", "model",
                                           "stream", "value"}
    assert {kind for kind, *_ in files.ROWS} >= {"special file", "hostile content", "special output", "lock", "odd output"}


class _NestedScopes(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("outer"):
            y = x @ x
            with torchair.scope.super_kernel("inner"):
                y = y * 2
            return y @ x


class _ReusedScope(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("sp1"):
            y = x @ x
        z = y * 3
        with torchair.scope.super_kernel("sp1"):
            return z @ x


@pytest.mark.parametrize(
    ("model", "scope", "pattern"),
    [
        (_NestedScopes(), "outer", r"split by inner super_kernel\('inner'\), from aten::mul \(Mul at .*test_bad_inputs.py:\d+\)"),
        (_ReusedScope(), "sp1", r"split by ops outside the scope .*, from aten::mul \(Mul at .*test_bad_inputs.py:\d+\)"),
    ],
)
def test_a_segment_count_that_is_off_names_what_split_the_scope(model, scope, pattern):
    (failure,) = parse_superkernel((scope,), {"segments": 1}).failures(compare(model, torch.ones(8, 8)))
    assert re.search(r"formed 2 SuperKernel segment\(s\), expected segments=1; it was " + pattern, failure.text), failure
