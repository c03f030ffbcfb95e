"""Timelines: the Perfetto trace and kernel_details.csv parse and show streams, SuperKernels and events."""

import csv
import io
import json
import re
from pathlib import Path

import pytest
import torch

from pytest_npufuse import NpufuseError, compare, torchair
from pytest_npufuse.ir.events import Event
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program
from pytest_npufuse.report.trace import (
    CSV_COLUMNS, HOST_PID, NPU_PID, case_directory_name, kernel_details_csv, trace_json, write_case_traces,
)
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import load_profile

A3 = load_profile("a3")


def multistream_run(**kwargs):
    builder = ProgramBuilder()
    x = builder.input("x", (864, 7168), "int8")
    w = builder.input("w", (7168, 4096), "int8")
    q = builder.op("npu::npu_quant_matmul", [x, w], (864, 4096), scope="sp1")
    builder.op("npu::npu_dequant_swiglu_quant", [q], (864, 2048), "int8", scope="sp1")
    builder.op("aten::add", [q, q], (864, 4096), stream="side")
    program = builder.build()
    plan = plan_program(program, A3, syncs=[Event("qmm_done", program.kernels[0].name, "Add")])
    return simulate(program, plan, A3, **kwargs)


def slices(trace, pid=NPU_PID):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def test_trace_has_a_track_per_stream_and_host_thread():
    trace = json.loads(trace_json(multistream_run()))
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names[(NPU_PID, 0)] == "Stream 0 (default)" and names[(NPU_PID, 1)] == "Stream 1 (side)"
    assert names[(HOST_PID, 0)].startswith("host thread 0")
    assert [e["name"] for e in slices(trace, HOST_PID)] == ["ModelExecute"]


def test_superkernel_is_a_parent_slice_holding_its_sub_kernels():
    trace = json.loads(trace_json(multistream_run()))
    kernels = [e for e in slices(trace) if e["cat"] == "kernel"]
    (parent,) = [e for e in kernels if e["name"].startswith("te_superkernel_")]
    children = [e for e in kernels if e["args"].get("superkernel") == parent["name"]]
    assert len(children) == 2
    for child in children:
        assert child["tid"] == parent["tid"]
        assert parent["ts"] <= child["ts"] and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-6


def test_each_event_is_a_flow_arrow_from_record_to_wait():
    trace = json.loads(trace_json(multistream_run()))
    starts = [e for e in trace["traceEvents"] if e["ph"] == "s"]
    ends = [e for e in trace["traceEvents"] if e["ph"] == "f"]
    assert len(starts) == len(ends) == 1 and starts[0]["id"] == ends[0]["id"]
    assert (starts[0]["tid"], ends[0]["tid"]) == (0, 1) and starts[0]["ts"] <= ends[0]["ts"]
    record = next(e for e in slices(trace) if e["name"] == "EventRecord")
    assert record["ts"] == starts[0]["ts"]


def test_host_scheduled_trace_shows_host_kernels_on_three_threads():
    trace = json.loads(trace_json(multistream_run(dynamic=True, host=HostConfig(threads=3, warm_tiling_cache=False))))
    host = slices(trace, HOST_PID)
    assert {e["tid"] for e in host} == {0, 1, 2}
    assert {"InferShape", "Tiling", "AllocMem", "Launch"} <= {e["name"] for e in host}


def test_kernel_details_csv_has_msprof_columns():
    run = multistream_run()
    rows = list(csv.DictReader(io.StringIO(kernel_details_csv(run))))
    assert tuple(rows[0]) == CSV_COLUMNS
    by_name = {row["Name"]: row for row in rows}
    add = by_name["Add"]
    assert (add["Type"], add["Accelerator Core"], add["Stream ID"]) == ("Add", "AI_VECTOR_CORE", "1")
    parent = next(row for row in rows if row["Type"] == "SuperKernel")
    assert parent["Accelerator Core"] == "MIX_AIC" and int(parent["Block Dim"]) >= 1
    qmm = by_name["QuantBatchMatmulV3"]
    assert qmm["Parent"] == parent["Name"] and qmm["Accelerator Core"] == "AI_CORE"
    assert float(qmm["Start Time(us)"]) >= float(parent["Start Time(us)"])


def test_compare_writes_both_variants_and_names_the_directory(tmp_path):
    class Chain(torch.nn.Module):
        def forward(self, a, b):
            with torchair.scope.super_kernel("sp1", ""):
                return (a @ b) @ b

    report = compare(Chain(), torch.ones(64, 64), torch.ones(64, 64), trace_dir=tmp_path, case="tests/x.py::test_y[a3]")
    directory = Path(report.trace_path)
    assert directory.parent == tmp_path and re.fullmatch(r"tests_x\.py_test_y_a3-[0-9a-f]{10}", directory.name)
    for variant in ("baseline", "variant"):
        trace = json.loads((directory / variant / "trace_view.json").read_text())
        assert any(e["ph"] == "X" and e["cat"] == "kernel" for e in trace["traceEvents"])


# Ids that one sanitising rule maps to the same text: punctuation, case, unicode (two normal forms of
# one letter, a look-alike), length, and a hidden name.
CLASHING_IDS = [
    "a/b", "a b", "a_b", "a:b", "a-b", "A_b", "a_B", "café", "cafe\u0301", "cafe", "caf\u0435", "\u00e9",
    ".", "..", "", "x" * 300, "x" * 301, "t::test[1]", "t::test[1 ]", "t::test_1_",
]


def test_case_directories_of_ids_differing_only_in_punctuation_case_or_unicode_never_collide():
    names = [case_directory_name(case) for case in CLASHING_IDS]
    assert len(set(names)) == len(names), names
    assert len({name.lower() for name in names}) == len(names), "two names that a case-insensitive file system folds"
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_.-]{1,111}", name) and not name.startswith(".")
    assert case_directory_name("plain_name") == "plain_name"


def test_traces_of_clashing_ids_land_in_their_own_directories(tmp_path):
    report = compare(lambda a, b: a @ b, torch.ones(8, 8), torch.ones(8, 8))
    roots = [write_case_traces(report, tmp_path, case) for case in ("a/b", "a b", "a_b")]
    assert len(set(roots)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(root.name for root in roots)


PUNCTUATION_IDS = ["a-b", "a_b", "a.b", "a b", "a/b", "a:b", "A-b"]


def test_tests_whose_ids_differ_only_in_punctuation_each_keep_their_own_traces(pytester):
    """Under pytest, through --npufuse-trace-dir: each test's check writes its own complete set of traces,
    and each trace is that test's (its kernel count is the test's own number of matmuls)."""
    pytester.makepyfile(test_ids=f'''
import pytest
import torch

IDS = {PUNCTUATION_IDS!r}


@pytest.mark.parametrize("n", range(len(IDS)), ids=IDS)
def test_t(npufuse, n):
    def model(a):
        for _ in range(n + 1):
            a = a @ a
        return a
    report = npufuse.check(model, torch.ones(8, 8))
    with open(report.trace_path + ".owner", "w") as owner:
        owner.write(str(n + 1))
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--npufuse-trace-dir=traces")
    result.assert_outcomes(passed=len(PUNCTUATION_IDS))
    roots = sorted(path for path in (pytester.path / "traces").iterdir() if path.is_dir())
    assert len(roots) == len(PUNCTUATION_IDS)
    for root in roots:
        matmuls = int(Path(f"{root}.owner").read_text())
        trace = json.loads((root / "variant" / "trace_view.json").read_text())
        assert sum(e["ph"] == "X" and e["cat"] == "kernel" for e in trace["traceEvents"]) == matmuls
        assert all((root / variant / "kernel_details.csv").is_file() for variant in ("baseline", "variant"))


def test_a_trace_directory_that_is_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "traces"
    blocker.write_text("not a directory")
    with pytest.raises(NpufuseError) as exc:
        compare(lambda a, b: a @ b, torch.ones(8, 8), torch.ones(8, 8), trace_dir=blocker)
    assert exc.value.file.endswith("/case")
    assert blocker.read_text() == "not a directory"
