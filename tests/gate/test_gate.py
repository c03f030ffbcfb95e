"""The CI performance gate end to end, through ``pytester``: baseline file, xdist, benchmark mirror, JSON, CLI.

The deliberately slowed case is ``Slow``: the same model as ``Fast`` with one extra unfusable kernel
inside the scope, which breaks the SuperKernel in two and costs a dispatch and a kernel head.
"""

import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_npufuse import compare
from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.gate import baseline
from pytest_npufuse.simulate.version import ModelIdentity
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import builtin_profile_text, load_profile

MODELS = '''
import torch
from pytest_npufuse import torch_npu, torchair


def inputs():
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randint(-10, 10, (64, 128), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-10, 10, (128, 256), dtype=torch.int8, generator=gen)
    return x1, x2, torch.randn((256,), generator=gen), torch.randn((64,), generator=gen)


class Fast(torch.nn.Module):
    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", ""):
            q = torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)
            y, s = torch_npu.npu_dequant_swiglu_quant(q)
        return y, s, q


class Slow(torch.nn.Module):
    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", ""):
            q = torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)
            q = q + 1
            y, s = torch_npu.npu_dequant_swiglu_quant(q)
        return y, s, q
'''

# test_a runs the model under test; test_b always runs Fast, so it stays unchanged.
CASES = '''
from models import {model} as Model, Fast, inputs


def test_a(npufuse):
    npufuse.check(Model(), *inputs())


def test_b(npufuse):
    npufuse.check(Fast(), *inputs())
'''

FAST_US, SLOW_US = "42.618", "51.745"


@pytest.fixture(scope="module")
def modeled(tmp_path_factory) -> dict[str, baseline.Entry]:
    """The entries the plugin records for Fast and Slow, from the library, to seed baselines without a run
    (from a models.py file as the runs have, so each op's source line is the same)."""
    path = tmp_path_factory.mktemp("seed") / "models.py"
    path.write_text(textwrap.dedent(MODELS).lstrip("\n"))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    model = ModelIdentity.of([load_profile("a3")], load_catalog())
    reports = {name: compare(namespace[name](), *namespace["inputs"](), target="a3") for name in ("Fast", "Slow")}
    return {name: baseline.Entry.of(report, model.for_target("a3")) for name, report in reports.items()}


@pytest.fixture
def seed(pytester, modeled):
    """Write a baseline file whose test_case.py entries were measured with the given models."""

    def go(name: str = "base.json", **models: str) -> Path:
        model = ModelIdentity.of([load_profile("a3")], load_catalog())
        entries = [(f"test_case.py::{test}", "a3", modeled[m]) for test, m in models.items()]
        baseline.write_baseline(pytester.path / name, baseline.Results(None, {}).with_entries(entries, model))
        return pytester.path / name

    return go


@pytest.fixture
def run(pytester):
    """Write the models and the cases with ``model`` as test_a's model, then run pytest in process."""
    pytester.makepyfile(models=MODELS)

    def go(model: str, *args: str):
        pytester.makepyfile(test_case=CASES.format(model=model))
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)

    return go


def gate_section(result) -> list[str]:
    """The lines of the baseline gate's terminal section, without its title."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "npufuse: baseline gate" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start + 1 : end] if line]


def test_first_run_records_missing_entries_with_a_warning_and_the_next_run_passes(run, pytester, seed):
    result = run("Fast", "--npufuse-baseline=base.json")
    result.assert_outcomes(passed=2, warnings=2)
    result.stdout.fnmatch_lines([
        "*BaselineWarning: npufuse: no baseline entry for test_case.py::test_a [[]a3[]] in base.json; "
        f"recording variant {FAST_US} us as its baseline if the test passes*",
        "*2 new*",
        "wrote base.json",
    ])
    text = (pytester.path / "base.json").read_text()
    data = json.loads(text)
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert data["schema_version"] == 1 and data["kind"] == "baseline" and len(data["model_version"]) == 16
    entry = data["entries"]["test_case.py::test_a"]["a3"]
    assert entry["variant_us"] == float(FAST_US) and entry["segments"] == 1 and entry["streams"] == 1
    assert set(entry) == {"mode", "baseline_us", "variant_us", "speedup", "segments", "streams", "model_version", "breaks", "sites"}
    assert entry["breaks"] == {}  # the scope is whole; a later failure names any breaking op as new
    assert entry["sites"]["SuperKernel sp1"][1] == 1 and "npu::npu_quant_matmul at models.py:15" in entry["sites"]
    # The other tests seed baselines through the library: it must write exactly what a first run records.
    assert seed("seeded.json", test_a="Fast", test_b="Fast").read_text() == text

    again = run("Fast", "--npufuse-baseline=base.json")
    again.assert_outcomes(passed=2)
    assert gate_section(again) == ["2 unchanged"]
    assert (pytester.path / "base.json").read_text() == text


def test_slowed_case_fails_that_test_with_before_and_after(seed, run, pytester):
    seed(test_a="Fast", test_b="Fast")
    before = (pytester.path / "base.json").read_text()
    result = run("Slow", "--npufuse-baseline=base.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*test_a*",
        f"npufuse regression: modeled time regressed on a3 against the baseline base.json (tolerance 0%): variant {FAST_US} us -> "
        f"{SLOW_US} us (+21.42%), speedup 1.082x -> 0.994x. If the slowdown is intended, re-baseline with "
        "--npufuse-update-baseline.",
        "what changed most (VARIANT, baseline -> now):",
        "  op at line * old us * new us * delta us * kernels * code",
        "  aten::add at models.py:24 * - * +* 0 -> 1 * q = q + 1",
        "  SuperKernel sp1 * 1 -> 2",
    ])
    assert gate_section(result) == [
        f"regressed     test_case.py::test_a [a3]: variant {FAST_US} us -> {SLOW_US} us (+21.42%), speedup 1.082x -> 0.994x",
        "1 regressed, 1 unchanged",
    ]
    # The add that slows it down is the op new against the baseline, with why it cannot be fused.
    result.stdout.fnmatch_lines([
        "scope 'sp1' is split into 2 SuperKernel segment(s) by:",
        "  aten::add (Add at *models.py:*) [[]NEW: not in the baseline[]]: Add is a TBE kernel, and a SuperKernel "
        "calls only Ascend C kernels",
        "  fix for aten::add: move the op before or after the scope*",
    ])
    result.stdout.no_fnmatch_line("*Traceback*")
    # The short summary carries the finding, not the run's numbers.
    result.stdout.fnmatch_lines(["FAILED test_case.py::test_a - Failed: npufuse regression: modeled time regres*", "*1 failed, 1 passed*"])
    assert (pytester.path / "base.json").read_text() == before


def test_tolerance_lets_a_small_slowdown_pass(seed, run, pytester):
    seed(test_a="Fast", test_b="Fast")
    pytester.makeini("[pytest]\nnpufuse_baseline = base.json\nnpufuse_tolerance = 30\n")
    result = run("Slow")
    result.assert_outcomes(passed=2)
    assert gate_section(result) == ["2 unchanged"]
    run("Slow", "--npufuse-tolerance=20%").assert_outcomes(passed=1, failed=1)


def test_improvement_is_reported_and_the_baseline_kept(seed, run, pytester):
    seed(test_a="Slow", test_b="Fast")
    before = (pytester.path / "base.json").read_text()
    result = run("Fast", "--npufuse-baseline=base.json")
    result.assert_outcomes(passed=2)
    assert gate_section(result) == [
        f"improved      test_case.py::test_a [a3]: variant {SLOW_US} us -> {FAST_US} us (-17.64%), speedup 0.994x -> 1.082x",
        "1 improved, 1 unchanged",
    ]
    assert (pytester.path / "base.json").read_text() == before


def test_update_rewrites_run_entries_and_keeps_the_others(seed, run, pytester):
    path = seed(test_a="Fast", test_b="Fast", test_gone="Fast")
    result = run("Slow", "--npufuse-baseline=base.json", "--npufuse-update-baseline", "-k", "test_a")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*npufuse: baseline gate (base.json, tolerance 0%, updating)*", "regressed *test_a*", "wrote base.json"])
    entries = json.loads(path.read_text())["entries"]
    assert sorted(entries) == ["test_case.py::test_a", "test_case.py::test_b", "test_case.py::test_gone"]
    assert entries["test_case.py::test_a"]["a3"]["variant_us"] == float(SLOW_US)
    assert entries["test_case.py::test_b"]["a3"]["variant_us"] == float(FAST_US)
    run("Slow", "--npufuse-baseline=base.json").assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "*base.json: corrupt JSON (*line 1 column 2 (byte 1)); fix or delete the file*the file was left untouched.*"),
        ('{"benchmarks": []}', '*base.json: not a pytest-npufuse baseline or run report (no "tool": "pytest-npufuse"*'),
        ('{"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 99, "entries": {}}',
         "*base.json: schema_version 99, but this pytest-npufuse reads schema_version 1*"),
        ('{"tool": "pytest-npufuse", "kind": "run", "schema_version": 1, "model": null, "entries": {}}',
         "*base.json: is a pytest-npufuse run report, not a baseline*"),
        ('{"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 1, "model": null, '
         '"entries": {"t": {"a3": {"variant_us": "fast"}}}}', "*base.json entry 't' [[]a3[]]: 'mode' is None, expected a string.*"),
    ],
)
def test_corrupt_or_foreign_baseline_is_a_clear_error_and_left_untouched(run, pytester, content, message):
    (pytester.path / "base.json").write_text(content)
    result = run("Fast", "--npufuse-baseline=base.json", "--npufuse-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --npufuse-baseline: {message}"])
    assert (pytester.path / "base.json").read_text() == content


def test_bad_gate_options_are_usage_errors(run):
    result = run("Fast", "--npufuse-update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npufuse-update-baseline needs --npufuse-baseline FILE*"])
    result = run("Fast", "--npufuse-baseline=b.json", "--npufuse-tolerance=-1")
    result.stderr.fnmatch_lines(["*--npufuse-tolerance: '-1' is not a percentage >= 0*"])


def test_model_change_says_rebaseline_once_instead_of_failing(seed, run, pytester):
    before = seed(test_a="Fast", test_b="Fast").read_text()
    a3 = builtin_profile_text("a3")
    assert "model_launch = 20.0" in a3
    assert 'name = "910c"' in a3  # the alias's text names its SKU; the copy keeps the baseline's target name
    faster = a3.replace("model_launch = 20.0", "model_launch = 18.0").replace('name = "910c"', 'name = "a3"')
    (pytester.path / "a3_faster_launch.toml").write_text(faster)
    changed = ("--npufuse-baseline=base.json", "--npu-target=a3_faster_launch.toml")
    result = run("Slow", *changed)
    result.assert_outcomes(passed=2)
    old_digest = json.loads(before)["model"]["profiles"]["a3"]
    result.stdout.fnmatch_lines([
        f"model changed test_case.py::test_a [[]a3[]]: variant {FAST_US} us -> {float(SLOW_US) - 2:.3f} us*",
        f"model changed test_case.py::test_b [[]a3[]]: variant {FAST_US} us -> {float(FAST_US) - 2:.3f} us*",
        "2 model changed",
        f"model changed, re-baseline: 2 entries were measured with another model version (profile a3 {old_digest} -> *), "
        "so they were not compared; run with --npufuse-update-baseline and commit base.json.",
    ])
    assert sum(line.startswith("model changed, re-baseline") for line in result.outlines) == 1
    assert (pytester.path / "base.json").read_text() == before
    run("Slow", *changed, "--npufuse-update-baseline").assert_outcomes(passed=2)
    assert gate_section(run("Slow", *changed)) == ["2 unchanged"]


@pytest.mark.filterwarnings("ignore:Benchmarks are automatically disabled because xdist")
def test_xdist_gives_the_same_verdicts_summary_baseline_and_json_as_a_serial_run(seed, run, pytester):
    """A regression, an unchanged entry and two missing entries, serial and under ``-n 2``."""
    path = seed(test_a="Fast", test_b="Fast")
    seeded = path.read_text()
    pytester.makepyfile(
        test_more="from models import Fast, Slow, inputs\n\n\n"
        "def test_c(npufuse):\n    npufuse.check(Fast(), *inputs())\n    npufuse.check(Slow(), *inputs())\n"
    )
    outputs = {}
    for label, extra in (("serial", ()), ("xdist", ("-n", "2"))):
        path.write_text(seeded)
        result = run("Slow", "--npufuse-baseline=base.json", f"--npufuse-json={label}.json", *extra)
        result.assert_outcomes(passed=2, failed=1, warnings=2)
        title = next(i for i, line in enumerate(result.outlines) if "npufuse: modeled NPU results" in line)
        table = result.outlines[title + 1 : title + 6]
        outputs[label] = (gate_section(result), table, path.read_text(), (pytester.path / f"{label}.json").read_text())
    assert outputs["serial"] == outputs["xdist"]
    section, table, written, _ = outputs["serial"]
    assert section[0].startswith("regressed     test_case.py::test_a [a3]")
    assert section[1].startswith("new           test_more.py::test_c [a3]")
    assert section[2].startswith("new           test_more.py::test_c (check 2) [a3]")
    assert [row.split()[-1] for row in table[1:]] == ["failed", "passed", "passed", "passed"]
    assert sorted(json.loads(written)["entries"]) == [
        "test_case.py::test_a", "test_case.py::test_b", "test_more.py::test_c", "test_more.py::test_c (check 2)"
    ]


def test_run_report_json_and_junit_properties(seed, run, pytester, capsys):
    result = run("Slow", "--npufuse-json=out/run.json", "--junitxml=junit.xml")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "out" / "run.json").read_text())
    assert report["tool"] == "pytest-npufuse" and report["kind"] == "run" and report["schema_version"] == 1
    assert report["summary"] == {"passed": 2} and report["gate"] is None
    (record,) = report["tests"]["test_case.py::test_a"]["npufuse"]
    assert record["key"] == "test_case.py::test_a" and record["variant_us"] == float(SLOW_US)
    assert report["entries"]["test_case.py::test_a"]["a3"]["model_version"] == record["model_version"]
    case = ET.parse(pytester.path / "junit.xml").find(".//testcase[@name='test_a']")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["npufuse_speedup"] == "0.9938" and properties["npufuse_variant_us"] == SLOW_US.rstrip("0")
    assert properties["npufuse_baseline_us"] == "51.425" and properties["npufuse_target"] == "a3"
    capsys.readouterr()
    # A run report compares with a baseline like two baselines do.
    assert cli(["compare", str(seed(test_a="Fast", test_b="Fast")), str(pytester.path / "out" / "run.json")]) == 1
    assert "1 regressed, 1 unchanged" in capsys.readouterr().out


BENCH = '''
from models import {model} as Model, inputs


def test_bench(npufuse, benchmark):
    npufuse.check(Model(), *inputs())
'''


def test_benchmark_mirror_measures_modeled_time_and_compare_fail_catches_the_slowdown(pytester):
    pytester.makepyfile(models=MODELS)
    storage = f"--benchmark-storage=file://{pytester.path / 'bench'}"
    pytester.makepyfile(test_bench=BENCH.format(model="Fast"))
    saved = pytester.runpytest_inprocess("-p", "no:cacheprovider", storage, "--benchmark-save=fast")
    saved.assert_outcomes(passed=1)
    (file,) = (pytester.path / "bench").rglob("0001_fast.json")
    (bench,) = json.loads(file.read_text())["benchmarks"]
    assert bench["stats"]["min"] == bench["stats"]["max"] == float(FAST_US) * 1e-6
    assert bench["options"]["timer"] == "npufuse_modeled_clock"
    assert bench["extra_info"]["npufuse_target"] == "a3"

    pytester.makepyfile(test_bench=BENCH.format(model="Slow"))
    slowed = pytester.runpytest_inprocess("-p", "no:cacheprovider", storage, "--benchmark-compare=0001", "--benchmark-compare-fail=min:1%")
    # pytest-benchmark raises its PerformanceRegression after the run: a session error, not a failed test.
    assert slowed.ret != pytest.ExitCode.OK
    pytest.LineMatcher(slowed.outlines + slowed.errlines).fnmatch_lines(["*Performance has regressed:*", "*test_bench (0001_fast) - Field 'min' has failed PercentageRegressionCheck: 21.4* > 1.0*"])
    pytester.makepyfile(test_bench=BENCH.format(model="Fast"))
    same = pytester.runpytest_inprocess("-p", "no:cacheprovider", storage, "--benchmark-compare=0001", "--benchmark-compare-fail=min:0%")
    assert same.ret == pytest.ExitCode.OK


def test_benchmark_mirror_refuses_a_second_check(pytester):
    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(test_bench=BENCH.format(model="Fast") + "    npufuse.check(Model(), *inputs())\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*pytest-benchmark records one measurement per test*"])


def test_compare_command_prints_a_table_and_fails_on_regression(seed, capsys):
    old, new = seed("old.json", test_a="Fast", test_b="Fast"), seed("new.json", test_a="Slow", test_b="Fast")
    assert cli(["compare", str(old), str(new), "--fail-above", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["test", "target", "old", "us", "new", "us", "change", "old", "speedup", "new", "speedup", "status"]
    assert out[1].split() == ["test_case.py::test_a", "a3", FAST_US, SLOW_US, "+21.42%", "1.082x", "0.994x", "regressed"]
    assert out[3] == "1 regressed, 1 unchanged" and out[-1].startswith("FAILED: 1 case(s) slower than 1% over")
    # Baselines record the time per op and line, so two of them say which op at which line grew.
    assert out[4] == "test_case.py::test_a [a3] regressed +21.42%; what changed (VARIANT, old -> new):"
    assert out[6].split()[:7] == ["aten::add", "at", "models.py:24", "-", "3.967", "+3.967", "0"]
    assert cli(["compare", str(old), str(new), "--fail-above", "30"]) == 0
    assert cli(["compare", str(new), str(old)]) == 0
    assert "improvements found" in capsys.readouterr().out


def test_compare_command_runs_as_a_module_and_rejects_bad_files(seed, pytester):
    old = seed("old.json", test_a="Fast", test_b="Fast")
    (pytester.path / "bad.json").write_text("[]")
    command = [sys.executable, "-m", "pytest_npufuse", "compare", str(old), str(pytester.path / "bad.json")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "bad.json: not a pytest-npufuse baseline or run report" in done.stderr
    done = subprocess.run(command[:-1] + [str(old)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "2 unchanged" in done.stdout


def test_readme_benchmark_mirror_example_measures_modeled_time(pytester):
    """A test that also takes ``benchmark`` (the CI guide's mirror, which tests/docs runs as written), with the
    model of the README's example, times modeled device time."""
    root = Path(__file__).parents[2]
    readme = (root / "README.md").read_text()
    model = readme.split("## A test", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    mirror = """

def test_sp1_time(npufuse, benchmark):
    x1, x2 = torch.randint(-8, 8, (64, 128), dtype=torch.int8), torch.randint(-8, 8, (128, 256), dtype=torch.int8)
    npufuse.check(Model(), x1, x2, torch.rand(256), torch.rand(64))
"""
    pytester.makepyfile(test_readme=model + mirror)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-k", "test_sp1_time", "--benchmark-json=bench.json", "--npufuse-json=run.json"
    )
    result.assert_outcomes(passed=1, deselected=1)
    (bench,) = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    (record,) = json.loads((pytester.path / "run.json").read_text())["tests"]["test_readme.py::test_sp1_time"]["npufuse"]
    assert bench["stats"]["min"] == bench["stats"]["mean"] == record["variant_us"] * 1e-6


def test_entries_are_keyed_without_the_target_id_when_several_targets_run(run, pytester):
    result = run("Fast", "--npufuse-baseline=base.json", "--npu-target=a2,a3", "-k", "test_b", "-v")
    result.stdout.fnmatch_lines(["*test_b[[]a2[]] PASSED*", "*test_b[[]a3[]] PASSED*"])
    entries = json.loads((pytester.path / "base.json").read_text())["entries"]
    assert list(entries) == ["test_case.py::test_b"] and sorted(entries["test_case.py::test_b"]) == ["a2", "a3"]
    assert gate_section(run("Fast", "--npufuse-baseline=base.json", "-k", "test_b")) == ["1 unchanged"]


def test_controller_refuses_results_of_a_worker_with_another_model(pytester):
    """Workers send their model in ``workeroutput``; numbers of two models are never mixed in one file."""
    from types import SimpleNamespace

    from pytest_npufuse.pytest.recorder import RunRecorder

    config = pytester.parseconfigure("-p", "no:cacheprovider")
    recorder = RunRecorder(config, pytester.path / "run.json")
    mine = ModelIdentity.of([load_profile("a3")], load_catalog())
    other = ModelIdentity("0", mine.catalog, mine.profiles)
    for worker, model in (("gw0", mine), ("gw1", other)):
        recorder.pytest_testnodedown(SimpleNamespace(workeroutput={"npufuse_model": model.to_json()}, gateway=SimpleNamespace(id=worker)), None)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    recorder.pytest_sessionfinish(session)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    (error,) = recorder.errors
    assert error.startswith("xdist worker gw1 modeled with {'simulator': '0'") and "same profiles and op catalog" in error
    assert not (pytester.path / "run.json").exists()
