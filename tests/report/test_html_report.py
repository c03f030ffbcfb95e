"""``--npufuse-html``: the report is rendered by headless Chromium and its DOM checked.

The browser runs the page's own scripts (sorting, the render-time stamp) and lays it out; the tests
then read the DOM it dumps. Without Chromium the browser tests are skipped with the reason shown
(``.ci/run`` installs it first).
"""

from __future__ import annotations

import json
import re
import struct

import pytest
import torch
from browser import Element, parse_dom

from pytest_npufuse import compare
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, case_report
from pytest_npufuse.report.html import case_view, render_page, write_html_report
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.target.profile import load_profile

MODELS = '''
import torch
from pytest_npufuse import torchair as tng


def tensors(count, rows, cols, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, cols, generator=gen) / cols ** 0.5 for _ in range(count)]


class BrokenByAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = (torch.nn.Parameter(t) for t in tensors(2, 128, 128, seed=1))

    def forward(self, x):
        with tng.scope.super_kernel("proj", ""):
            y = (x @ self.a) @ self.b
            y = y + 1.0
            return (y @ self.a) @ self.b


class SideStream(torch.nn.Module):
    def __init__(self, wait):
        super().__init__()
        self.wait = wait
        self.ready = tng.ops.npu_create_tagged_event(tag="ready")
        self.done = tng.ops.npu_create_tagged_event(tag="done")

    def forward(self, a, b):
        s = a + b
        tng.ops.npu_tagged_event_record(self.ready)
        with tng.scope.npu_stream_switch("1"):
            if self.wait:
                tng.ops.npu_tagged_event_wait(self.ready)
            m = torch.mm(s, b)
            tng.ops.npu_tagged_event_record(self.done)
        tng.ops.npu_tagged_event_wait(self.done)
        return m + a, s


class KeepAlive(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ready = tng.ops.npu_create_tagged_event(tag="ready")

    def forward(self, a, b):
        scaled = a * 2
        tng.ops.npu_tagged_event_record(self.ready)
        with tng.scope.npu_stream_switch("1"):
            tng.ops.npu_tagged_event_wait(self.ready)
            out = scaled @ b
        shifted = b - 1
        return out, shifted
'''

CASES = '''
import pytest
from models import BrokenByAdd, KeepAlive, SideStream, tensors


@pytest.mark.superkernel(scope="proj", segments=2, breaks=["aten::add"])
def test_broken(npufuse):
    npufuse.check(BrokenByAdd(), *tensors(1, 64, 128))


@pytest.mark.multistream(race_free=False)
def test_race(npufuse):
    print("hello from test_race")
    npufuse.check(SideStream(wait=False), *tensors(2, 128, 128), mode="reduce-overhead")


@pytest.mark.multistream(race_free=False)
def test_hazard(npufuse):
    npufuse.check(KeepAlive(), *tensors(2, 128, 128), mode="reduce-overhead")


@pytest.mark.multistream(streams=2, min_speedup=100)
def test_ordered(npufuse):
    print("hello from test_ordered")
    npufuse.check(SideStream(wait=True), *tensors(2, 128, 128), mode="reduce-overhead")


@pytest.mark.skip(reason="needs two dies")
def test_two_dies(npufuse):
    pass
'''

# The line of ``y = y + 1.0`` in MODELS, as the scope-break list must cite it.
ADD_LINE = MODELS.lstrip("\n").splitlines().index("            y = y + 1.0") + 1


@pytest.fixture
def run(pytester):
    pytester.makepyfile(models=MODELS, test_html_cases=CASES)
    return lambda *args: pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def assert_self_contained(page: str) -> None:
    """Nothing the page would fetch: no external scripts, styles, fonts or images."""
    lowered = page.lower()
    for needle in ("<link", " src=", "@import", "url(http", "@font-face"):
        assert needle not in lowered, needle
    assert lowered.count("http") == lowered.count('xmlns="http://www.w3.org/2000/svg"')


def section(dom: Element, case: str) -> Element:
    (found,) = dom.find_all("section", cls="case", data_case=case)
    return found


def run_of(case: Element, variant: str) -> Element:
    (found,) = case.find_all("g", cls="run", data_variant=variant)
    return found


def lanes(run: Element) -> list[tuple[str, str]]:
    return [(lane.attrs["data-kind"], lane.attrs["data-label"]) for lane in run.find_all("g", cls="lane")]


def test_report_shows_timelines_scope_breaks_races_hazards_and_events_in_a_browser(run, pytester, chromium):
    result = run("--npufuse-html=out/report.html")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    page = pytester.path / "out" / "report.html"
    assert_self_contained(page.read_text())
    dom = chromium.dom(page)
    (html,) = dom.find_all("html")
    assert float(html.attrs["data-rendered-ms"]) > 0

    (summary,) = dom.find_all("table", id="summary")
    body = summary.find_all("tbody")[0].find_all("tr")
    rows = {row.find_all("td")[0].all_text(): row.find_all("td")[-2].all_text() for row in body}
    # Worst first, as the terminal table: the failed test, then the lowest speedup.
    assert [row.attrs["data-case"] for row in body][0] == "test_html_cases.py::test_ordered"
    assert all(float(row.find_all("td")[-1].attrs["data-v"]) > 0 for row in body)  # pytest's real durations
    assert rows == {"test_html_cases.py::test_broken": "passed", "test_html_cases.py::test_race": "passed",
                    "test_html_cases.py::test_hazard": "passed", "test_html_cases.py::test_ordered": "failed"}

    broken = section(dom, "test_html_cases.py::test_broken")
    baseline, variant = run_of(broken, "baseline"), run_of(broken, "variant")
    assert lanes(baseline) == lanes(variant) == [("host", "host thread 0 (ordinary)"), ("stream", "stream default")]
    assert not baseline.find_all("g", cls="superkernel") and not baseline.find_all("rect", cls="break")
    superkernels = variant.find_all("g", cls="superkernel")
    assert [sk.attrs["data-subkernels"] for sk in superkernels] == ["2", "2"]
    assert all(len(sk.find_all("rect", cls="sub")) == 2 and len(sk.find_all("rect", cls="sk")) == 1 for sk in superkernels)
    (add,) = variant.find_all("rect", cls="break")
    assert "breaks scope proj" in add.all_text() and "aten::add" in add.all_text()
    (site,) = broken.find_all("li", cls="break-site")
    (code,) = site.find_all("code")
    assert "aten::add" in site.all_text() and code.all_text().endswith(f"models.py:{ADD_LINE}")
    (why,) = site.find_all("div", cls="why")
    assert why.all_text() == "Add is a TBE kernel, and a SuperKernel calls only Ascend C kernels"

    race = section(dom, "test_html_cases.py::test_race")
    (arrow,) = race.find_all("path", cls="race")
    assert arrow.attrs["marker-end"] == "url(#arrow-race)"
    assert "read-after-write race" in arrow.all_text()
    assert lanes(run_of(race, "variant"))[1:] == [("stream", "stream default"), ("stream", "stream 1")]
    assert len(race.find_all("path", cls="event")) == 1  # only 'done' is recorded and waited

    hazard = section(dom, "test_html_cases.py::test_hazard")
    (arrow,) = hazard.find_all("path", cls="hazard")
    assert "lifetime hazard" in arrow.all_text() and not hazard.find_all("path", cls="race")

    ordered = section(dom, "test_html_cases.py::test_ordered")
    assert len(ordered.find_all("path", cls="event")) == 2 and not ordered.find_all("path", cls="race")
    assert "test failed" in ordered.all_text()
    (message,) = ordered.find_all("pre", cls="message")
    assert message.all_text().startswith("npufuse speedup: multistream with streams 'default', '1': modeled speedup ")
    (captured,) = ordered.find_all("details", cls="captured")
    assert "Captured stdout call" in captured.all_text() and "hello from test_ordered" in captured.all_text()
    assert "below min_speedup=100.0x" in message.all_text() and not broken.find_all("pre", cls="message")
    (op_types,) = ordered.find_all("table", cls="op-types")
    # Longest first: the matmul's decode tiling spreads it over every Cube core, so the Add takes longer.
    assert [row.find_all("td")[0].all_text() for row in op_types.find_all("tr")[1:]] == ["Add (AI_VECTOR_CORE)", "MatMulV3 (AI_CORE)"]
    (modules,) = broken.find_all("table", cls="modules")
    assert [row.find_all("td")[0].all_text() for row in modules.find_all("tr")[1:]] == ["(model)"]
    assert "Computing" in broken.find_all("p", cls="overlap")[0].all_text()

    by_speed = chromium.dom(page, "#sort=speedup-desc")
    (summary,) = by_speed.find_all("table", id="summary")
    speedups = [float(row.find_all("td")[5].attrs["data-v"]) for row in summary.find_all("tbody")[0].find_all("tr")]
    assert speedups == sorted(speedups, reverse=True) and len(speedups) == 4

    # The tests without a check, skipped ones with their reason; the environment of the numbers.
    (other,) = dom.find_all("table", id="other")
    assert [[td.all_text() for td in row.find_all("td")] for row in other.find_all("tr")[1:]] == [
        ["test_html_cases.py::test_two_dies", "skipped", "needs two dies"]
    ]
    (environment,) = dom.find_all("dl", cls="env")
    facts = dict(zip((dt.all_text() for dt in environment.find_all("dt")), (dd.all_text() for dd in environment.find_all("dd"))))
    assert facts["torch"] == torch.__version__ and len(facts["model version"]) == 16
    assert facts["profile a3"].endswith(f"digest {load_profile('a3').digest}")
    assert [b.all_text() for b in dom.find_all("button") if "data-filter" in b.attrs] == ["1 failed", "3 passed"]

    # Filter by verdict and search the case ids: other rows and their sections are hidden.
    def shown(fragment: str) -> list[str]:
        (table,) = chromium.dom(page, fragment).find_all("table", id="summary")
        return [row.attrs["data-case"] for row in table.find_all("tr")[1:] if "hidden" not in row.classes]

    assert shown("#filter=failed") == ["test_html_cases.py::test_ordered"]
    assert shown("#search=RACE") == ["test_html_cases.py::test_race"]
    assert shown("#filter=passed&search=ha") == ["test_html_cases.py::test_hazard"]

    # Kernel names sit on boxes wide enough for them; zooming in shows the names of narrower ones.
    def names(drawn: Element) -> list[str]:
        return [t.all_text() for t in drawn.find_all("text", cls="name") if "display: none" not in t.attrs.get("style", "")]

    whole = names(run_of(broken, "variant"))
    assert "MatMulV3" in names(run_of(broken, "baseline")) and all(name for name in whole)
    (timeline,) = broken.find_all("svg", cls="timeline")
    span = float(timeline.attrs["data-span-us"])
    assert timeline.attrs["data-view"] == f"0-{span:g}"
    index = [s.attrs["data-case"] for s in dom.find_all("section", cls="case")].index("test_html_cases.py::test_broken")
    # A quarter of the run, around where the sub-kernel MatMulV3_1 runs (its tooltip gives its start and end).
    (sub,) = run_of(broken, "variant").find_all("rect", data_name="MatMulV3_1")
    start, end = (float(t) for t in sub.all_text().split(") ")[1].split(" us")[0].split("–"))
    low = min(max(0.0, (start + end) / 2 - span / 8), span * 0.75)
    window = f"{low:g}-{low + span / 4:g}"
    zoomed_dom = chromium.dom(page, f"#zoom={index}:{window}")
    zoomed = section(zoomed_dom, "test_html_cases.py::test_broken")
    (timeline,) = zoomed.find_all("svg", cls="timeline")
    assert timeline.attrs["data-view"] == window
    transforms = {g.attrs.get("transform", "") for g in zoomed.find_all("g", cls="zoomable")}
    (transform,) = transforms
    assert transform.startswith("translate(") and abs(float(transform.split("scale(")[1].split(",")[0]) - 4) < 1e-3
    ticks = [t.all_text() for t in timeline.find_all("text", cls="tick")]
    assert all(low <= float(t.split()[0]) <= low + span / 4 for t in ticks) and len(ticks) >= 5
    # Sub-kernels too narrow for a name in the whole run are named at four times the scale (in full, or cut
    # with an ellipsis where even that is too narrow).
    shown_zoomed = names(run_of(zoomed, "variant"))
    assert not any(name.startswith("MatMulV") for name in whole)
    assert any(name.startswith("MatMulV") for name in shown_zoomed)

    png = chromium.screenshot(page, pytester.path / "report.png", 1280, 1000)
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (1280, 1000)


@pytest.mark.filterwarnings("ignore:Benchmarks are automatically disabled because xdist")
def test_xdist_controller_writes_the_same_report_with_the_gate_verdicts_as_a_serial_run(run, pytester):
    run("--npufuse-baseline=base.json", "--npufuse-update-baseline", "-k", "broken").assert_outcomes(passed=1)
    baseline = json.loads((pytester.path / "base.json").read_text())
    entry = baseline["entries"]["test_html_cases.py::test_broken"]["a3"]
    entry["variant_us"] = round(entry["variant_us"] / 2, 3)
    pages = {}
    for label, extra in (("serial", ()), ("xdist", ("-n", "2"))):
        (pytester.path / "base.json").write_text(json.dumps(baseline))  # a run records its missing entries
        result = run(f"--npufuse-html={label}.html", "--npufuse-baseline=base.json", "-k", "broken or race", *extra)
        result.assert_outcomes(passed=1, failed=1)
        pages[label] = (pytester.path / f"{label}.html").read_text()
    def timeless(page: str) -> str:  # pytest's measured durations differ run to run
        page = re.sub(r'<td data-v="[0-9.]*" class="duration">[^<]*</td>', "", page)
        return re.sub(r'<span class="duration">[^<]*</span>', "", page)

    assert timeless(pages["serial"]) == timeless(pages["xdist"])
    dom = parse_dom(pages["serial"])
    (summary,) = dom.find_all("table", id="summary")
    gates = {row.find_all("td")[0].all_text(): row.find_all("td")[-3].all_text() for row in summary.find_all("tr")[1:]}
    assert gates == {"test_html_cases.py::test_broken": "regressed", "test_html_cases.py::test_race": "new"}
    # Worst first, as the terminal table; pytest's durations; the captured output of each test.
    assert [row.attrs["data-case"] for row in summary.find_all("tr")[1:]] == ["test_html_cases.py::test_broken", "test_html_cases.py::test_race"]
    assert all(float(row.find_all("td")[-1].attrs["data-v"]) > 0 for row in summary.find_all("tr")[1:])
    (captured,) = section(dom, "test_html_cases.py::test_race").find_all("details", cls="captured")
    assert "Captured stdout call" in captured.all_text() and "hello from test_race" in captured.all_text()
    (gate,) = section(dom, "test_html_cases.py::test_broken").find_all("span", cls="gate")
    assert gate.all_text().startswith("gate: regressed — test_html_cases.py::test_broken [a3]: ")
    assert f"{entry['variant_us']:.3f} us -> " in gate.all_text()


def test_html_file_that_is_a_directory_is_a_usage_error(pytester):
    pytester.makepyfile("def test_t():\n    pass\n")
    (pytester.path / "out").mkdir()
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--npufuse-html=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npufuse-html out: is a directory*"])


def many_kernels(layers: int):
    """``layers`` x (a scope of 2 matmuls and a fusable norm, 3 tiny vector ops, a side-stream matmul):
    7 kernels per layer."""
    b = ProgramBuilder()
    x = b.input("x", (16, 1024))
    w = b.input("w", (1024, 1024))
    for layer in range(layers):
        h = b.op("aten::mm", [x, w], (16, 1024), scope=f"l{layer}")
        h = b.op("npu::npu_rms_norm", [h], (16, 1024), scope=f"l{layer}")
        h = b.op("aten::mm", [h, w], (16, 1024), scope=f"l{layer}")
        for _ in range(3):
            h = b.op("aten::mul", [h, h], (16, 1024))
        b.op("aten::mm", [h, w], (16, 1024), stream="side")
        x = h
    return b.build()


def test_a_large_case_is_drawn_with_kernels_below_a_pixel_merged(tmp_path, chromium):
    report = case_report(many_kernels(720), load_profile("a3"))
    assert len(report.baseline.kernels) == 5040
    page = tmp_path / "large.html"
    write_html_report(page, [case_view(report, "large")])
    dom = chromium.dom(page)
    case = section(dom, "large")
    for name, run in (("baseline", report.baseline), ("variant", report.variant)):
        drawn = run_of(case, name)
        top = [k for k in run.kernels if k.parent is None]
        merged = drawn.find_all("rect", cls="agg")
        single = [r for r in drawn.find_all("rect") if r.classes & {"k", "sk"}]
        assert merged and sum(int(r.attrs["data-count"]) for r in merged) + len(single) == len(top)
        assert len(drawn.find_all("rect")) < len(top) / 2
    sk_rows = sum(k.parent is None and k.op_type == "npufuse::superkernel" for k in report.variant.kernels)
    assert sk_rows == 720


def test_page_without_checks_says_so():
    page = render_page([])
    assert "No npufuse.check() ran in this session." in page and '<table id="summary"' in page


def test_each_host_thread_gets_its_own_lane():
    """Host-scheduled execution on GE's three pipelined threads: three host lanes above the stream."""

    def model(x, w):
        return torch.relu(x @ w) * 2

    x, w = torch.ones(8, 16), torch.ones(16, 16)
    report = compare(model, x, w, dynamic=True, host=HostConfig(threads=3))
    dom = parse_dom(render_page([case_view(report, "host")]))
    for variant in ("baseline", "variant"):
        drawn = run_of(section(dom, "host"), variant)
        assert lanes(drawn) == [("host", "host thread 0 (ordinary)"), ("host", "host thread 1 (memory)"),
                                ("host", "host thread 2 (launch)"), ("stream", "stream default")]
        host_boxes = [r for lane in drawn.find_all("g", cls="lane", data_kind="host") for r in lane.find_all("rect", cls="host")]
        assert len(host_boxes) == len(report.baseline.host if variant == "baseline" else report.variant.host)
