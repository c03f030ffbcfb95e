"""End-to-end runs of the plugin on temporary test files, through ``pytester``."""

import json
import re
from pathlib import Path

import pytest

from pytest_npufuse.target.profile import builtin_profile_text

MODELS = '''
from pathlib import Path

import pytest
import torch
from pytest_npufuse import torch_npu, torchair

M, K, N = 64, 128, 256


def inputs():
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randint(-10, 10, (M, K), dtype=torch.int8, generator=gen)
    x2 = torch.randint(-10, 10, (K, N), dtype=torch.int8, generator=gen)
    scale = torch.randn((N,), generator=gen)
    pertoken = torch.randn((M,), generator=gen)
    return x1, x2, scale, pertoken


def qmm(x1, x2, scale, pertoken):
    return torch_npu.npu_quant_matmul(x1, x2, scale, pertoken_scale=pertoken, output_dtype=torch.bfloat16)


class Fused(torch.nn.Module):
    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", ""):
            q = qmm(x1, x2, scale, pertoken)
            y, s = torch_npu.npu_dequant_swiglu_quant(q)
        return y, s, q


class Broken(torch.nn.Module):
    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", ""):
            q = qmm(x1, x2, scale, pertoken)
            q = q + 1
            y, s = torch_npu.npu_dequant_swiglu_quant(q)
        return y, s, q


class Drifted(torch.nn.Module):
    """Computes the dequant in a different order: equal within tolerance, not bit for bit."""

    def forward(self, x1, x2, scale, pertoken):
        q = torch_npu.npu_quant_matmul(x1, x2, scale, output_dtype=torch.bfloat16)
        q = (q.float() * pertoken[:, None]).to(torch.bfloat16)
        y, s = torch_npu.npu_dequant_swiglu_quant(q)
        return y, s, q
'''


@pytest.fixture
def run(pytester):
    """Write MODELS plus a test body into a temporary project and run pytest on it."""

    def go(body: str, *args: str):
        pytester.makepyfile(models=MODELS)
        pytester.makepyfile(test_case="from models import *\n" + body)
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", *args)

    return go


def test_fused_case_passes_and_prints_summary(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=1, min_speedup=1.0)
def test_sp1(npufuse):
    report = npufuse.check(Fused(), *inputs())
    assert report.bit_exact and report.superkernels["sp1"].outcome == "fused"
'''
    )
    result.assert_outcomes(passed=1)
    # 80 columns (pytester's terminal): the target and mode every row shares are in the title.
    result.stdout.fnmatch_lines(["*npufuse: modeled NPU results (a3, max-autotune)*", "*test_sp1*x*1*1*passed*"])


def test_scope_broken_by_unfusable_op_gives_two_segments(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=2, breaks=["aten::add"])
def test_sp1(npufuse):
    npufuse.check(Broken(), *inputs())
'''
    )
    result.assert_outcomes(passed=1)


def test_break_fails_one_segment_expectation_naming_the_op(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=1)
def test_sp1(npufuse):
    npufuse.check(Broken(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*scope 'sp1' formed 2 SuperKernel segment(s), expected segments=1; it was broken by aten::add (Add at *models.py:*"]
    )


def test_wrong_segments_fails_with_the_number(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=3)
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*scope 'sp1' formed 1 SuperKernel segment(s), expected segments=3*"])


def test_bit_mismatch_names_output_index_and_values(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1")
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs(), reference=Drifted())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*precision: * output(s) are not bit-identical between BASELINE and VARIANT:*",
            "*output[[]2[]]: * element(s) differ; first at index [[]*, *[]]: baseline * (bits 0x*), variant * (bits 0x*)*",
        ]
    )


def test_min_speedup_above_model_fails_with_both_times(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", min_speedup=2.0)
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*scope 'sp1': modeled speedup *x on a3 is below min_speedup=2.0x (baseline * us, variant * us)*"])


def test_a2_skips_fused_expectation_and_runs_unsupported_one(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=1)
def test_fused(npufuse):
    npufuse.check(Fused(), *inputs())


@pytest.mark.superkernel(scope="sp1", outcome="unsupported")
def test_unsupported(npufuse):
    report = npufuse.check(Fused(), *inputs())
    assert report.superkernels["sp1"].segments == 0
    assert "not supported on Atlas A2" in report.superkernels["sp1"].reason
''',
        "--npu-target=a2",
    )
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SuperKernel is not supported on Atlas A2*this test expects 'fused'*"])


def test_unsupported_expectation_fails_on_a3(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", outcome="unsupported")
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*scope 'sp1': outcome is 'fused', expected 'unsupported'*"])


def test_reduce_overhead_mode_reports_unsupported(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", outcome="unsupported")
def test_sp1(npufuse):
    report = npufuse.check(Fused(), *inputs(), mode="reduce-overhead")
    assert "max-autotune" in report.superkernels["sp1"].reason
'''
    )
    result.assert_outcomes(passed=1)


def test_target_list_runs_each_test_per_target(run):
    result = run(
        '''
def test_any(npufuse, npu_target):
    assert npufuse.target.name == npu_target
''',
        "--npu-target=a2,a3",
        "-v",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_any[[]a2[]] PASSED*", "*test_any[[]a3[]] PASSED*"])


def test_npu_target_marker_skips_other_targets(run):
    result = run(
        '''
@pytest.mark.npu_target("a2")
def test_only_a2(npu_target):
    assert npu_target == "a2"
'''
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*runs only on a2; the current target is a3*"])


def test_ini_default_target(run, pytester):
    pytester.makeini("[pytest]\nnpu_target = a2\n")
    result = run("def test_t(npu_target):\n    assert npu_target == 'a2'\n")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('superkernel(scope="sp1", segment=1)', "*unknown argument 'segment'. Did you mean 'segments'?*"),
        ('superkernel(scope="sp1", outcome="melted")', "*outcome='melted' is not one of fused, unfused, *"),
        ('superkernel(segments=1)', "*needs scope='<name>'*"),
        ('superkernel(scope="sp1", segments=-1)', "*segments=-1 must be an integer >= 0*"),
        ('superkernel(scope="sp1", breaks=["add"])', "*breaks=[[]'add'[]] must be a list of op types*"),
        ("multistream(stream=2)", "*multistream marker: unknown argument 'stream'. Did you mean 'streams'?*"),
        ("multistream(race_free='no')", "*multistream marker: race_free='no' must be True or False.*"),
        ("multistream(2)", "*multistream marker takes keyword arguments only*"),
    ],
)
def test_bad_marker_arguments_fail_clearly(run, marker, message):
    result = run(f"@pytest.mark.{marker}\ndef test_sp1(npufuse):\n    npufuse.check(Fused(), *inputs())\n")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_scope_name_not_found_fails(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp9")
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*super_kernel scope 'sp9' was not found in the captured graph (scopes seen: 'sp1')*"])


def test_bad_options_string_fails_naming_scope_and_option(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", options="stream-fusoin=1")
def test_sp1(npufuse):
    npufuse.check(Fused(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*super_kernel scope 'sp1': [[]Super Kernel[]] Invalid compile option: stream-fusoin option is not supported "
         "(unknown option 'stream-fusoin'). Did you mean 'stream-fusion'?*"]
    )


def test_graph_break_inside_scope_names_the_scope(run):
    result = run(
        '''
class Breaks(torch.nn.Module):
    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", ""):
            q = qmm(x1, x2, scale, pertoken)
            if q.sum().item() > 0:
                q = q * 2
        return q


def test_sp1(npufuse):
    npufuse.check(Breaks(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*npufuse: graph break inside super_kernel('sp1') at *test_case.py:7: *. Move the breaking code*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_unknown_target_is_a_usage_error(run):
    result = run("def test_t():\n    pass\n", "--npu-target=a9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown NPU target 'a9'; built-in targets are 910b1, 910b2, 910b3, 910b4, 910c, a2, a3*"])


def test_markers_are_documented(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.superkernel(scope, *", "@pytest.mark.multistream(*", "@pytest.mark.npu_target(*names)*"])


def test_readme_example_passes(pytester):
    """The ten-line example in the README is a working test."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("## A test", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_readme=example)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*npufuse: modeled NPU results (a3, max-autotune)*", "*test_readme.py::test_sp1*passed*"])


def test_compile_gives_a_callable_with_its_plan(run):
    result = run(
        '''
import torch


def test_compile(npufuse):
    fused = npufuse.compile(Fused())
    plain = npufuse.compile(Fused(), superkernel=False)
    args = inputs()
    with torch.no_grad():
        out, ref = fused(*args), plain(*args)
    assert all(torch.equal(a, b) for a, b in zip(out, ref))
    (graph,) = fused.npufuse_backend.graphs
    assert graph.plan.scope("sp1").outcome == "fused" and len(graph.plan.tasks) == 1
    assert plain.npufuse_backend.graphs[0].plan.scopes == () and len(plain.npufuse_backend.graphs[0].plan.tasks) == 2
'''
    )
    result.assert_outcomes(passed=1)


STRICT = """
class Strict(torch.nn.Module):
    def __init__(self, options):
        super().__init__()
        self.options = options

    def forward(self, x1, x2, scale, pertoken):
        with torchair.scope.super_kernel("sp1", self.options):
            q = qmm(x1, x2, scale, pertoken) + 1
            return torch_npu.npu_dequant_swiglu_quant(q)
"""


@pytest.mark.parametrize(
    ("options", "marker", "outcome", "message"),
    [
        ("strict-scope-check=bypass", 'outcome="bypassed"', "passed", None),
        ("strict-scope-check=abort", 'outcome="aborted"', "passed", None),
        ("strict-scope-check=bypass", "segments=2", "failed", "*scope 'sp1': outcome is 'bypassed' (scope sp1 is split by unfusable op(s) aten::add (Add at *), expected 'fused'.*"),
        ("strict-scope-check=abort", 'outcome="bypassed"', "failed", "*scope 'sp1': outcome is 'aborted' (*abort: compilation stops), expected 'bypassed'.*"),
        ("", 'outcome="aborted"', "failed", "*scope 'sp1': outcome is 'fused', expected 'aborted'.*"),
    ],
)
def test_strict_scope_check_outcomes(run, options, marker, outcome, message):
    result = run(
        STRICT
        + f"""
@pytest.mark.superkernel(scope="sp1", {marker})
def test_sp1(npufuse):
    npufuse.check(Strict({options!r}), *inputs())
"""
    )
    result.assert_outcomes(**{outcome: 1})
    if message:
        result.stdout.fnmatch_lines([message])


def test_a_variant_that_never_finishes_is_null_in_the_json_report(run, pytester):
    body = STRICT + (
        '\n@pytest.mark.superkernel(scope="sp1", outcome="aborted")\n'
        "def test_sp1(npufuse):\n    npufuse.check(Strict('strict-scope-check=abort'), *inputs())\n"
    )
    run(body, "--npufuse-json=run.json").assert_outcomes(passed=1)

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    document = json.loads((pytester.path / "run.json").read_text(), parse_constant=refuse)
    (row,) = [row for test in document["tests"].values() for row in test["npufuse"]]
    assert row["variant_us"] is None and row["device_us"] is None


def test_a_benchmark_fixture_of_another_plugin_is_left_alone(run):
    body = (
        "@pytest.fixture\ndef benchmark():\n    return 'someone else'\n\n"
        "def test_t(npufuse, benchmark):\n    npufuse.check(Fused(), *inputs())\n    assert benchmark == 'someone else'\n"
    )
    run(body, "-p", "no:benchmark").assert_outcomes(passed=1)


def test_unexpected_abort_fails_a_test_without_marker(run):
    result = run(STRICT + "\ndef test_sp1(npufuse):\n    npufuse.check(Strict('strict-scope-check=abort'), *inputs())\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the VARIANT cannot run on a3: sp1: scope sp1 is split by unfusable op(s) aten::add*(plog: *plog-*.log)*"])


def test_pyproject_overrides_profile_and_catalog_and_trace_dir_writes_timelines(run, pytester):
    pytester.makefile(
        ".toml",
        pyproject='''
[tool.npufuse.targets.a3.overhead_us]
kernel_head = 7.0

[tool.npufuse.ops."aten::add"]
engine = "vector"
fusable = true
sync_all = false
block_dim = "vector_bytes"
''',
    )
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", segments=1, breaks=[])
def test_sp1(npufuse):
    assert npufuse.target.overhead_us["kernel_head"] == 7.0
    report = npufuse.check(Broken(), *inputs())
    assert Path(report.trace_path, "variant", "trace_view.json").is_file()
''',
        f"--npufuse-trace-dir={pytester.path / 'traces'}",
    )
    result.assert_outcomes(passed=1)
    (case_dir,) = (pytester.path / "traces").iterdir()
    assert re.fullmatch(r"test_case\.py_test_sp1-[0-9a-f]{10}", case_dir.name)
    assert sorted(p.name for p in (case_dir / "baseline").iterdir()) == [
        "kernel_details.csv", "module_statistic.csv", "op_statistic.csv", "trace_view.json",
    ]
    result.stdout.fnmatch_lines(["*npufuse: modeled NPU results (a3*", "*test_sp1*passed*"])


def test_profile_file_adds_a_target_and_a_bad_key_is_a_usage_error(run, pytester):
    pytester.makefile(".toml", b4='[targets.b4]\nbase = "a2"\ncores = { aic = 20, aiv = 40 }\n')
    body = "def test_t(npufuse):\n    assert (npufuse.target.name, npufuse.target.aic) == ('b4', 20)\n"
    run(body, "--npufuse-profile=b4.toml", "--npu-target=b4").assert_outcomes(passed=1)
    pytester.makefile(".toml", bad="[targets.a3.cores]\naic = 'many'\n")
    result = run(body, "--npufuse-profile=bad.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad.toml [targets.a3] [cores]: key 'aic' is 'many', expected an integer" in result.stderr.str()



def test_a_declared_op_naming_an_unregistered_cost_rule_stops_the_run(run, pytester):
    pytester.makefile(".toml", pyproject='[tool.npufuse.ops."acc::warp"]\nengine = "vector"\nfusable = false\n'
                      'sync_all = false\nblock_dim = "auto"\ncost = "warp"\n')
    result = run("def test_t(npufuse):\n    pass\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert '["acc::warp"]: cost rule \'warp\' is not registered; known rules: ' in result.stderr.str()


@pytest.mark.parametrize(
    ("toml", "args", "message"),
    [
        ("[targets.b5]\nbase = 'a3'\ncores = { aic = 'many' }\n", (), "bad.toml [targets.b5] [cores]: key 'aic' is 'many', expected an integer"),
        ("[overhead_us]\nkernel_head = 2.5\n", (), 'bad.toml: neither a complete profile (it has no [target] table) nor a partial one; add base = "a3"'),
        ("", ("--npufuse-trace-dir=bad.toml",), "--npufuse-trace-dir bad.toml: is a file; give a directory"),
    ],
    ids=["unused-target", "partial-without-base", "trace-dir-is-a-file"],
)
def test_a_broken_profile_file_or_trace_dir_is_a_usage_error_even_if_unused(run, pytester, toml, args, message):
    pytester.makefile(".toml", bad=toml)
    result = run("def test_t(npufuse):\n    pass\n", *(args or ("--npufuse-profile=bad.toml",)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_target_given_as_a_profile_path_is_known_by_its_own_name(run, pytester):
    pytester.makefile(".toml", mine=builtin_profile_text("910c"))
    body = (
        "@pytest.mark.npu_target('910c')\n"
        "def test_t(npufuse, npu_target):\n    assert npufuse.target.name == npu_target == '910c'\n"
    )
    run(body, "--npu-target=mine.toml").assert_outcomes(passed=1)
    result = run(body, "--npu-target=mine.toml,910c")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--npu-target: '910c' is target '910c' again; give each target once." in result.stderr.str()

STREAMS = """
from pytest_npufuse import torchair as tng


class Racy(torch.nn.Module):
    def __init__(self, wait=True, record=True):
        super().__init__()
        self.wait, self.record = wait, record
        self.event = tng.ops.npu_create_tagged_event("e")

    def forward(self, a, b):
        x = a + b
        if self.record:
            tng.ops.npu_tagged_event_record(self.event)
        with tng.scope.npu_stream_switch("1"):
            if self.wait:
                tng.ops.npu_tagged_event_wait(self.event)
            y = x @ b
        return y


def pair():
    gen = torch.Generator().manual_seed(3)
    return torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen)
"""


@pytest.mark.parametrize(
    ("marker", "model", "outcome", "lines"),
    [
        ("multistream(streams=2)", "Racy()", "passed", []),
        (
            "multistream(streams=2)",
            "Racy(wait=False)",
            "failed",
            [
                "npufuse race: read-after-write race on `x` (float32 [[]64, 64[]]): read on stream '1' while stream "
                "'default' may still be writing it",
                "  written on stream 'default' by Add (aten::add) at test_case.py:*: x = a + b",
                "  read on stream '1' by MatMulV3 (aten::mm) at test_case.py:*: y = x @ b",
                "  fix: make `event = torchair.ops.npu_create_tagged_event(tag=\"<tag>\")` once (in __init__), then "
                "`torchair.ops.npu_tagged_event_record(event)` on stream 'default' after test_case.py:*, and "
                "`torchair.ops.npu_tagged_event_wait(event)` on stream '1' before test_case.py:*.",
                "- precision: 1 of 1 output(s) are not bit-identical between BASELINE and VARIANT (the race(s) above corrupt them):",
            ],
        ),
        ("multistream(race_free=False)", "Racy(wait=False)", "passed", []),
        ("multistream(race_free=False)", "Racy()", "failed", ["*race_free=False expects the sanitizer to find a race*"]),
        (
            "multistream()",
            "Racy(record=False)",
            "failed",
            ["*the VARIANT cannot run on a3: modeled deadlock: stream '1' waits before MatMulV3 for event 'e' "
             "(npu_tagged_event_wait at *test_case.py:*), which is never recorded*"],
        ),
        ("multistream(race_free=False)", "Racy(record=False)", "passed", []),
        ("multistream(streams=3)", "Racy()", "failed", ["*multistream: the VARIANT ran on 2 stream(s) ('default', '1'), expected streams=3.*"]),
        ("multistream(min_speedup=5)", "Racy()", "failed", ["*multistream with streams 'default', '1': modeled speedup *x on a3 is below min_speedup=5.0x*"]),
    ],
)
def test_multistream_outcomes(run, marker, model, outcome, lines):
    result = run(
        STREAMS + f"\n\n@pytest.mark.{marker}\ndef test_streams(npufuse):\n"
        f"    npufuse.check({model}, *pair(), mode='reduce-overhead')\n"
    )
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines(lines)


def test_a_race_fails_even_without_a_marker(run):
    result = run(STREAMS + "\n\ndef test_streams(npufuse):\n    npufuse.check(Racy(wait=False), *pair(), mode='reduce-overhead')\n", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["npufuse race: read-after-write race on `x`*", "FAILED test_case.py::test_streams - Failed: npufuse race: *"])


def test_parametrized_tests_may_build_the_same_tagged_events(run):
    result = run(
        STREAMS + "\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_streams(npufuse, n):\n"
        "    npufuse.check(Racy(), *pair(), mode='reduce-overhead')\n",
        "--npu-target=a2,a3",
    )
    result.assert_outcomes(passed=4)


MODULE_EVENT = """
from pytest_npufuse import torchair as tng

EVENT = tng.ops.npu_create_tagged_event("shared")


class UsesModuleEvent(torch.nn.Module):
    def forward(self, a, b):
        x = a + b
        tng.ops.npu_tagged_event_record(EVENT)
        with tng.scope.npu_stream_switch("1"):
            tng.ops.npu_tagged_event_wait(EVENT)
            return x @ b


def test_first(npufuse):
    npufuse.check(UsesModuleEvent(), torch.ones(8, 8), torch.ones(8, 8), mode="reduce-overhead")


def test_later(npufuse):
    npufuse.check(UsesModuleEvent(), torch.ones(8, 8), torch.ones(8, 8), mode="reduce-overhead")


def test_a_test_may_not_take_the_module_events_tag():
    with pytest.raises(Exception, match="tagged event tag shared is already in use"):
        tng.ops.npu_create_tagged_event("shared")
"""


def test_a_tagged_event_created_at_module_import_works_in_every_later_test(run):
    run(MODULE_EVENT).assert_outcomes(passed=3)


def test_a_conftest_listing_the_plugin_gets_a_warning_instead_of_pluggys_error(pytester):
    pytester.makeconftest('pytest_plugins = ["pytest_npufuse.plugin"]\n')
    pytester.makepyfile("def test_one(npu_target):\n    assert npu_target == 'a3'\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*conftest.py lists 'pytest_npufuse.plugin' in pytest_plugins, but pytest-npufuse is already loaded*"])
    assert "already registered" not in result.stdout.str() + result.stderr.str()


def test_the_plugin_named_with_dash_p_loads_once(pytester):
    pytester.makepyfile("def test_one(npu_target):\n    assert npu_target == 'a3'\n")
    pytester.runpytest_subprocess("-p", "pytest_npufuse.plugin").assert_outcomes(passed=1)


def test_duplicate_tag_within_one_test_is_an_error(run):
    result = run(STREAMS + "\n\ndef test_streams(npufuse):\n    Racy()\n    Racy()\n")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*tagged event tag e is already in use*"])


def test_wait_tensor_in_reduce_overhead_is_refused(run):
    result = run(
        "from pytest_npufuse import torchair as tng\n\n\nclass W(torch.nn.Module):\n    def forward(self, a, b):\n"
        "        x = a + b\n        with tng.scope.npu_stream_switch('1'):\n            tng.scope.npu_wait_tensor(b, x)\n"
        "            return b @ b\n\n\ndef test_w(npufuse):\n    npufuse.check(W(), torch.ones(4, 4), torch.ones(4, 4), mode='reduce-overhead')\n"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*npufuse: npu_wait_tensor at *test_case.py:* is not supported in reduce-overhead mode*"])


def test_wrong_breaks_fails_naming_the_actual_op(run):
    result = run(
        '''
@pytest.mark.superkernel(scope="sp1", breaks=["aten::mul"])
def test_sp1(npufuse):
    npufuse.check(Broken(), *inputs())
'''
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*scope 'sp1' was broken by aten::add (Add at *models.py:*); expected breaks=[[]'aten::mul'[]].*"])


def results_table(result) -> list[str]:
    """The lines of the modeled-results section, without its title."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "npufuse: modeled NPU results" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start + 1 : end] if line]


TABLE = '''
@pytest.mark.parametrize("name", ["a_parameter_long_enough_to_push_the_case_column_well_past_the_usual_width"])
def test_long(npufuse, name):
    npufuse.check(Fused(), *inputs())
    npufuse.check(Broken(), *inputs())


def test_slowest(npufuse):
    npufuse.check(Broken(), *inputs())
    assert False, "fails after its check"
'''


@pytest.mark.parametrize("columns", [120, 80])
def test_results_table_fits_the_terminal_worst_first_with_totals_and_tells_two_checks_apart(run, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    result = run(TABLE)
    result.assert_outcomes(passed=1, failed=1)
    table = results_table(result)
    assert all(len(line) <= columns for line in table), [len(line) for line in table]
    # Too wide for the long case id: the target and mode every row shares go to the title, the headers get shorter.
    assert any(" npufuse: modeled NPU results (a3, max-autotune) " in line for line in result.outlines)
    assert table[0].split() == ["case", "base", "us", "var", "us", "speedup", "SK", "str", "verdict"]
    if columns == 120:
        assert table[4].startswith("total: 3 check(s) (1 failed, 2 passed); baseline ") and "speedup" in table[4]
    else:
        assert table[4].startswith("total: 3 (1 failed, 2 passed); ") and table[4].endswith("x")
    cases = [line.split()[0] for line in table[1:4]]
    assert cases[0].endswith("test_slowest") and table[1].split()[-1] == "failed"
    # The Broken check (speedup below 1) comes before the Fused one; both are shortened, the second marked.
    assert "…" in cases[1] and cases[1].endswith("width]") and "] (check 2) " in table[2]
    assert "…" in cases[2] and "(check" not in table[3]
    assert cases[1].startswith("test_long[…")  # a long test name drops its file, then its parameters' middle
    speedups = [float(line.split()[-4].rstrip("x")) for line in table[2:4]]
    assert speedups == sorted(speedups)

    verbose = results_table(run(TABLE, "-v"))
    assert verbose[0].split()[:3] == ["case", "target", "mode"] and "precision" in verbose[0] and "host us" in verbose[0]
    assert any(line.startswith("test_case.py::test_long[a_parameter_long_enough_to_push_the_case_column_well")
               for line in verbose)


@pytest.mark.parametrize("saved", [False, True])
def test_pytest_benchmarks_storage_folder_is_removed_only_when_this_run_made_it_empty(pytester, saved):
    pytester.makepyfile("def test_plain():\n    pass\n")
    if saved:
        (pytester.path / ".benchmarks").mkdir()
        (pytester.path / ".benchmarks" / "0001_saved.json").write_text("{}")
    assert pytester.runpytest_inprocess("-p", "no:cacheprovider").ret == 0
    assert (pytester.path / ".benchmarks").exists() is saved


def test_a_warning_from_inside_the_package_becomes_a_note_of_the_failure_or_moves_to_the_users_line(run):
    """A scope ignored in reduce-overhead mode warns (ScopeIgnoredWarning, raised in the pipeline): a failing
    check carries it as a note and pytest prints no warnings summary; a passing one shows it at the test's line."""
    result = run(
        "\n\n@pytest.mark.superkernel('sp1', outcome='fused')\ndef test_fails(npufuse):\n"
        "    npufuse.check(Fused(), *inputs(), mode='reduce-overhead')\n"
        "\n\ndef test_passes(npufuse):\n    npufuse.check(Fused(), *inputs(), mode='reduce-overhead')\n"
    )
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["note: ScopeIgnoredWarning: SuperKernel scope(s) sp1 ignored in reduce-overhead mode*"])
    output = result.stdout.str()
    summary = output[output.index("warnings summary"):output.index("-- Docs:")]
    assert "pytest_npufuse" not in summary and "test_case.py::test_fails" not in summary
    assert "test_case.py::test_passes" in summary and "test_case.py:10: ScopeIgnoredWarning" in summary
