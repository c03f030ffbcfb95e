"""``python -m pytest_npufuse compare``: per-op-type and per-kernel deltas, a history of runs, and the
comparison written as markdown, JSON, CSV and HTML."""

import csv
import io
import json
import re
from pathlib import Path

from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.gate import baseline
from pytest_npufuse.gate.run_document import run_document, write_run_report
from pytest_npufuse.simulate.version import ModelIdentity

MODEL = ModelIdentity("2", "c" * 16, (("a3", "p" * 16),))


def record(key: str, variant_us: float, op_types: dict[str, tuple[int, float]], kernels: dict[str, float]) -> dict:
    """A check's record as ``--npufuse-json`` writes it: its entry, time per op type and longest tasks."""
    entry = baseline.Entry("max-autotune", 40.0, variant_us, round(40.0 / variant_us, 4), 1, 1, MODEL.for_target("a3"))
    statistic = [{"OP Type": name.split()[0], "Core Type": name.split()[1].strip("()"), "Count": count,
                  "Total Time(us)": f"{us:.3f}"} for name, (count, us) in op_types.items()]
    return {"key": key, "target": "a3", **entry.to_json(), "attribution": {"variant": {"op_statistic": statistic}},
            "kernels": [[name, name.rstrip("_0123456789"), us] for name, us in kernels.items()]}


def report(path: Path, *records: dict) -> Path:
    write_run_report(path, run_document(MODEL, {r["key"]: ("passed", [r]) for r in records}, None))
    return path


def fast(key="t.py::test_a", us=30.0):
    return record(key, us, {"SuperKernel (MIX_AIC)": (1, 20.0), "Add (AI_VECTOR_CORE)": (1, 4.0)},
                  {"te_superkernel_1": 20.0, "Add": 4.0})


def slow(key="t.py::test_a"):
    return record(key, 38.0, {"SuperKernel (MIX_AIC)": (2, 22.0), "Add (AI_VECTOR_CORE)": (1, 4.0),
                              "Mul (AI_VECTOR_CORE)": (1, 4.5)},
                  {"te_superkernel_1": 11.0, "te_superkernel_2": 11.0, "Add": 4.0, "Mul": 4.5})


def test_the_op_types_and_kernels_behind_a_regression_are_printed_largest_first(tmp_path, capsys):
    old = report(tmp_path / "old.json", fast(), fast("t.py::test_b"))
    new = report(tmp_path / "new.json", slow(), fast("t.py::test_b"))
    assert cli(["compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["t.py::test_a", "a3", "30.000", "38.000", "+26.67%", "1.333x", "1.053x", "regressed"]
    assert out[3] == "1 regressed, 1 unchanged"
    start = out.index("t.py::test_a [a3] regressed +26.67%; what changed (VARIANT, old -> new):")
    assert [line.split() for line in out[start + 1 : start + 4]] == [
        ["op", "type", "old", "us", "new", "us", "delta", "us", "tasks"],
        ["Mul", "(AI_VECTOR_CORE)", "-", "4.500", "+4.500", "0", "->", "1"],
        ["SuperKernel", "(MIX_AIC)", "20.000", "22.000", "+2.000", "1", "->", "2"],
    ]
    kernels = out.index("  kernel            old us  new us  delta us")
    assert [line.split()[0] for line in out[kernels + 1 : kernels + 4]] == ["te_superkernel_2", "te_superkernel_1", "Mul"]
    assert out[-1].startswith("FAILED: 1 case(s) slower than 0% over ")


def test_markdown_json_csv_and_html_files_say_the_same(tmp_path, capsys):
    old = report(tmp_path / "old.json", fast(), fast("t.py::test_b"))
    new = report(tmp_path / "new.json", slow(), fast("t.py::test_b"))
    files = {name: tmp_path / f"cmp.{name if name != 'markdown' else 'md'}" for name in ("markdown", "json", "csv", "html")}
    args = [arg for name, path in files.items() for arg in (f"--{name}", str(path))]
    assert cli(["compare", str(old), str(new), *args]) == 1
    out = capsys.readouterr().out
    assert all(f"wrote {path}" in out for path in files.values())

    comment = files["markdown"].read_text()
    assert comment.startswith("## pytest-npufuse: modeled NPU time\n\n**1 case(s) slower** than 0% (1 regressed, 1 unchanged)")
    assert "- **regressed** `t.py::test_a [a3]`: variant 30.000 us -> 38.000 us (+26.67%)" in comment
    assert "  | `Mul (AI_VECTOR_CORE)` | - | 4.500 | +4.500 | 0 -> 1 |" in comment
    assert "| `t.py::test_b` | `a3` | 30.000 | 30.000 | +0.00% | 1.333x | unchanged |" in comment

    data = json.loads(files["json"].read_text())
    assert data["kind"] == "comparison" and data["counts"] == {"regressed": 1, "unchanged": 1}
    (first, second) = data["cases"]
    assert first["key"] == "t.py::test_a" and first["status"] == "regressed" and first["variant_us"] == [30.0, 38.0]
    assert first["op_types"][0] == {"name": "Mul (AI_VECTOR_CORE)", "old_us": None, "new_us": 4.5, "delta_us": 4.5,
                                    "old_count": 0, "new_count": 1}
    assert second["op_types"] == [] and second["kernels"] == []

    rows = list(csv.DictReader(io.StringIO(files["csv"].read_text())))
    assert rows[0] == {"test": "t.py::test_a", "target": "a3", "level": "case", "name": "", "old us": "30.0",
                       "new us": "38.0", "delta us": "8.000", "change %": "26.667", "status": "regressed"}
    assert [(r["level"], r["name"]) for r in rows[1:4]] == [("op type", "Mul (AI_VECTOR_CORE)"),
                                                            ("op type", "SuperKernel (MIX_AIC)"), ("kernel", "te_superkernel_2")]

    page = files["html"].read_text()
    assert re.findall(r'<tr data-status="(\w+)">', page) == ["regressed", "unchanged"]
    assert circles(page, "t.py::test_a [a3]") == ['data-us="30"', 'data-us="38"']


def circles(page: str, case: str) -> list[str]:
    """The marks of one case's trend: ``data-us="..."`` per run, or ``class="missing"``."""
    section = page.split(f'data-case="{case}"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<circle [^>]*?(data-us="[^"]+"|class="missing")', section)


def test_a_history_of_runs_plots_each_case_and_judges_the_newest_against_the_one_before(tmp_path, capsys):
    runs = [report(tmp_path / "r1.json", fast()), report(tmp_path / "r2.json", slow()), report(tmp_path / "r3.json", slow()),
            report(tmp_path / "r4.json", fast("t.py::test_other"))]
    assert cli(["compare", *map(str, runs[:3]), "--html", str(tmp_path / "trend.html")]) == 0  # r3 equals r2
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["test", "target", "r1", "us", "r2", "us", "r3", "us", "change", "speedup", "status"]
    assert out[1].split() == ["t.py::test_a", "a3", "30.000", "38.000", "38.000", "+0.00%", "1.053x", "unchanged"]
    assert circles((tmp_path / "trend.html").read_text(), "t.py::test_a [a3]") == ['data-us="30"', 'data-us="38"', 'data-us="38"']
    # A case absent from a run is a gap with a hollow mark, not a zero.
    assert cli(["compare", *map(str, runs), "--html", str(tmp_path / "gaps.html")]) == 0
    page = (tmp_path / "gaps.html").read_text()
    assert circles(page, "t.py::test_a [a3]") == ['data-us="30"', 'data-us="38"', 'data-us="38"', 'class="missing"']
    assert circles(page, "t.py::test_other [a3]") == ['class="missing"'] * 3 + ['data-us="30"']


def test_a_variant_that_stops_finishing_reads_never_and_regresses(tmp_path, capsys):
    old = report(tmp_path / "old.json", fast())
    hung = fast()
    hung["variant_us"] = None
    new = report(tmp_path / "new.json", hung)
    assert cli(["compare", str(old), str(new)]) == 1
    assert capsys.readouterr().out.splitlines()[1].split()[:5] == ["t.py::test_a", "a3", "30.000", "never", "-"]


def test_compare_needs_two_files_and_never_writes_over_an_input(tmp_path, capsys):
    old = report(tmp_path / "old.json", fast())
    new = report(tmp_path / "new.json", slow())
    assert cli(["compare", str(old)]) == 2
    assert "give at least two files, oldest first" in capsys.readouterr().err
    before = new.read_text()
    assert cli(["compare", str(old), str(new), "--markdown", str(new)]) == 2
    assert "the second would overwrite the first" in capsys.readouterr().err and new.read_text() == before


def sited(key: str, variant_us: float, sites: dict[str, tuple[float, int]]) -> baseline.Entry:
    return baseline.Entry("max-autotune", 40.0, variant_us, round(40.0 / variant_us, 4), 1, 1, MODEL.for_target("a3"),
                          sites=tuple((name, us, count) for name, (us, count) in sites.items()))


def baseline_file(path: Path, *entries: tuple[str, baseline.Entry]) -> Path:
    baseline.write_baseline(path, baseline.Results(None, {}).with_entries([(k, "a3", e) for k, e in entries], MODEL))
    return path


def test_two_baselines_name_the_ops_at_lines_behind_a_regression_in_text_and_markdown(tmp_path, capsys):
    grown = {"aten::mm at m.py:10": (20.0, 1), "aten::cumsum at m.py:14": (6.0, 1), "SuperKernel sp1": (4.0, 2)}
    old = baseline_file(tmp_path / "old.json", ("t.py::test_a", sited("t.py::test_a", 30.0, {"aten::mm at m.py:10": (20.0, 1), "SuperKernel sp1": (2.0, 1)})))
    new = baseline_file(tmp_path / "new.json", ("t.py::test_a", sited("t.py::test_a", 38.0, grown)))
    md = tmp_path / "c.md"
    assert cli(["compare", str(old), str(new), "--markdown", str(md), "--json", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    start = out.index("t.py::test_a [a3] regressed +26.67%; what changed (VARIANT, old -> new):")
    assert [line.split()[:3] for line in out[start + 2 : start + 4]] == [["aten::cumsum", "at", "m.py:14"], ["SuperKernel", "sp1", "2.000"]]
    comment = md.read_text()
    assert "  | `aten::cumsum at m.py:14` | - | 6.000 | +6.000 | 0 -> 1 |" in comment
    assert "  | `SuperKernel sp1` | 2.000 | 4.000 | +2.000 | 1 -> 2 |" in comment
    (case,) = json.loads((tmp_path / "c.json").read_text())["cases"]
    assert case["sites"][0] == {"name": "aten::cumsum at m.py:14", "old_us": None, "new_us": 6.0, "delta_us": 6.0,
                                "old_count": 0, "new_count": 1}


def test_an_older_baseline_without_sites_still_compares_with_a_note(tmp_path, capsys):
    old = baseline_file(tmp_path / "old.json", ("t.py::test_a", baseline.Entry("max-autotune", 40.0, 30.0, 1.3333, 1, 1, MODEL.for_target("a3"))))
    new = baseline_file(tmp_path / "new.json", ("t.py::test_a", sited("t.py::test_a", 38.0, {"aten::mm at m.py:10": (20.0, 1)})))
    md = tmp_path / "c.md"
    assert cli(["compare", str(old), str(new), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "t.py::test_a [a3] regressed +26.67%; note: per-op detail is unavailable" in out
    assert "(per-op detail is unavailable: the baseline entry was recorded before" in md.read_text()
