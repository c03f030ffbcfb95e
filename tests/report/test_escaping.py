"""Hostile names (test ids, scopes, streams, op types) in every output: the HTML report opened in a
browser runs none of them and keeps its layout, the markdown keeps its table rows, the terminal gets
no escape sequence. The rule itself (:func:`visible`) is checked on chosen and on generated text."""

from __future__ import annotations

import csv
import io
import re
import unicodedata
import warnings

import pytest
from browser import parse_dom
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npufuse.cli.main import main
from pytest_npufuse.errors import OutputFileError
from pytest_npufuse.gate import baseline, comparison_formats
from pytest_npufuse.gate.comparison import compare_runs, read_run
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, case_report
from pytest_npufuse.plan.tasks import LogRecord
from pytest_npufuse.pytest.terminal import results_table
from pytest_npufuse.report.escaping import (
    MAX_MARKS, html_text, markdown_code, spreadsheet_cell, terminal_text, visible,
)
from pytest_npufuse.report.html import case_view, render_page
from pytest_npufuse.report.plog import write_plog
from pytest_npufuse.simulate.version import ModelIdentity
from pytest_npufuse.target.profile import load_profile

# What each payload would do if it were markup: mark the page as run.
_RUN = 'document.documentElement.setAttribute("data-pwned","{}")'
HOSTILE = (
    "<script>" + _RUN.format("script") + "</script>",
    "\"><img src=x onerror='" + _RUN.format("img") + "'>",
    "'><svg onload='" + _RUN.format("svg") + "'>",
    "</script><script>" + _RUN.format("close") + "</script>",
    "javascript:" + _RUN.format("url"),
    "\x1b[2J\x1b[1;1H\x1b]0;title\x07\x1b[32mPASSED\x1b[0m",
    "x" * 3000,
    "test_ok[\u202egpj.exe]\u2066\u200b",
    "z" + "\u0301" * 200,
    "nul\x00bell\x07line\nbreak\r\x9b31m",
    "a|b`c``d\\|e",
)
VIEWPORT = (1280, 900)


def hidden(text: str) -> list[str]:
    """Characters of ``text`` that act instead of being read, and marks stacked past the limit."""
    found, marks = [], 0
    for char in text:
        category = unicodedata.category(char)
        marks = marks + 1 if category in ("Mn", "Me") else 0
        if category in ("Cc", "Cf", "Cs", "Zl", "Zp", "Cn") or marks > MAX_MARKS:
            found.append(char)
    return found


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("ok[\u202egpj.exe]", "ok[\\u202egpj.exe]"),
        ("a\x00b\x9bc\U000e0001", "a\\x00b\\x9bc\\U000e0001"),
        ("line\nbreak\ttab", "line\\nbreak\\ttab"),
        ("e" + "\u0301" * 6, "e" + "\u0301" * MAX_MARKS + "\\u0301" * 2),
        ("café Ελληνικά 日本語 नमस्ते tiếng Việt", "café Ελληνικά 日本語 नमस्ते tiếng Việt"),
    ],
)
def test_visible_writes_what_would_act_as_its_escape_and_leaves_any_script_alone(text, shown):
    assert visible(text) == shown
    assert visible(shown) == shown


def test_multiline_text_keeps_its_line_feeds_and_tabs_only():
    assert visible("a\nb\tc\rd\x1b", multiline=True) == "a\nb\tc\\rd\\x1b"


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec=None, exclude_categories=())))
def test_no_generated_name_reaches_an_output_unescaped(text):
    for shown in (terminal_text(text), html_text(text), markdown_code(text, table=True)):
        assert not hidden(shown) and "\n" not in shown
    assert terminal_text(terminal_text(text)) == terminal_text(text)
    markup = html_text(text)
    assert not set(markup) & set("<>\"'")
    assert all(re.match(r"&(amp|lt|gt|quot|#x27);", markup[at:]) for at in range(len(markup)) if markup[at] == "&")
    code = markdown_code(text, table=True)
    fence = re.match("`+", code).group()
    inner = code[len(fence):-len(fence)]
    assert code.endswith(fence) and fence not in inner and not re.search(r"(?<!\\)\|", inner)
    padded = inner[1:-1] if inner.startswith(" ") and inner.endswith(" ") and inner.strip(" ") else inner
    assert padded.replace("\\|", "|") == visible(text) or not visible(text).strip(" ")


def hostile_page(tmp_path):
    """A report in which every name a user controls is hostile: the test ids (checks and tests without
    one), scope names, stream tags and op types (so kernel names), the failure message and gate text."""
    b = ProgramBuilder()
    x = b.input("x", (16, 256))
    w = b.input("w", (256, 256))
    h = x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the hostile op types are unknown to the catalog
        for name in HOSTILE:
            h = b.op("aten::mm", [h, w], (16, 256), scope=name)
            b.op(f"acc::{name}", [h], (16, 256), stream=name)
            b.op("aten::mul", [h, h], (16, 256), scope=name)
        report = case_report(b.build(), load_profile("a3"))
    views = [{**case_view(report, name, {"status": "regressed", "text": name}), "verdict": "failed", "message": name}
             for name in HOSTILE]
    others = [{"nodeid": name + "::other", "outcome": "skipped", "message": name} for name in HOSTILE]
    page = render_page(views, tests=others, environment={"rootdir": HOSTILE[0], "commit": HOSTILE[5]})
    # Measured after the page's own script: the page's width, the viewport's, every summary row's box.
    measure = (
        "<script>(function(){var d=document.documentElement,s=document.getElementById('summary');"
        "d.setAttribute('data-page-width',d.scrollWidth);d.setAttribute('data-viewport',window.innerWidth);"
        "d.setAttribute('data-rows',Array.prototype.map.call(s.tBodies[0].rows,function(r){"
        "var b=r.getBoundingClientRect();return b.right+' '+b.height;}).join(';'));})();</script>"
    )
    path = tmp_path / "hostile.html"
    path.write_text(page.replace("</body>", measure + "</body>"))
    return path, report


def test_a_report_of_hostile_names_runs_none_of_them_and_keeps_its_layout_in_a_browser(tmp_path, chromium):
    path, report = hostile_page(tmp_path)
    dom = chromium.dom(path, size=VIEWPORT)
    (html,) = dom.find_all("html")
    assert "data-pwned" not in html.attrs and float(html.attrs["data-rendered-ms"]) > 0
    assert len(dom.find_all("script")) == 2  # the page's own and the measurement's
    elements = list(dom.iter())
    assert not [e.tag for e in elements if e.tag in ("img", "iframe", "object", "embed", "foreignobject")]
    assert not [(e.tag, name) for e in elements for name in e.attrs if name.startswith("on")]
    assert {e.attrs["class"] for e in dom.find_all("svg")} <= {"timeline"}
    assert all(a.attrs["href"].startswith("#case-") for a in dom.find_all("a"))
    text = "".join(t for e in elements for t in (*e.content, *e.attrs.values()) if isinstance(t, str))
    assert not hidden(text.replace("\n", ""))  # line feeds only where the page's text has lines

    # Each name reads as itself (its hidden characters escaped) wherever it is shown.
    shown = [visible(name) for name in HOSTILE]
    (summary,) = dom.find_all("table", id="summary")
    rows = summary.find_all("tbody")[0].find_all("tr")
    assert [row.find_all("td")[0].all_text() for row in rows] == shown
    assert [s.find_all("h2")[0].all_text() for s in dom.find_all("section", cls="case")] == shown
    (other,) = dom.find_all("table", id="other")
    assert [row.find_all("td")[0].all_text() for row in other.find_all("tr")[1:]] == [s + "::other" for s in shown]
    case = dom.find_all("section", cls="case")[0]
    assert [li.attrs["data-scope"] for li in case.find_all("li", cls="scope")] == shown
    assert case.find_all("pre", cls="message")[0].all_text() == visible(HOSTILE[0], multiline=True)
    lanes = [g.attrs["data-label"] for g in case.find_all("g", cls="lane", data_kind="stream")]
    assert set(lanes) >= {f"stream {s}" for s in shown}
    kernels = {r.attrs["data-name"] for r in case.find_all("rect") if "data-name" in r.attrs}
    side = {visible(k.name) for k in report.variant.kernels if k.stream != "default"}  # named after the op types
    assert len(side) == len(HOSTILE) and side <= kernels

    # The layout holds: nothing is wider than the window, every row is there and inside it.
    width, viewport = int(html.attrs["data-page-width"]), int(html.attrs["data-viewport"])
    assert viewport == VIEWPORT[0] and width <= viewport
    boxes = [tuple(map(float, row.split())) for row in html.attrs["data-rows"].split(";")]
    assert len(boxes) == len(HOSTILE) and all(right <= viewport and height > 0 for right, height in boxes)


def test_the_comparison_page_of_hostile_test_ids_runs_none_of_them_and_keeps_its_layout_in_a_browser(
    tmp_path, chromium
):
    """compare --html, the trend page a CI job publishes: every test id hostile, opened in Chromium."""
    old = write_results(tmp_path / "old.json", HOSTILE, 30.0)
    new = write_results(tmp_path / "new.json", HOSTILE, 36.0)
    page = comparison_formats.html(compare_runs([read_run(old), read_run(new)], 0.0))
    measure = (
        "<script>(function(){var d=document.documentElement;d.setAttribute('data-page-width',d.scrollWidth);"
        "d.setAttribute('data-viewport',window.innerWidth);})();</script>"
    )
    path = tmp_path / "comparison.html"
    path.write_text(page.replace("</body>", measure + "</body>"))
    dom = chromium.dom(path, size=VIEWPORT)
    (html,) = dom.find_all("html")
    assert "data-pwned" not in html.attrs and len(dom.find_all("script")) == 1 + page.count("<script")
    elements = list(dom.iter())
    assert not [e.tag for e in elements if e.tag in ("img", "iframe", "object", "embed", "foreignobject")]
    assert not [(e.tag, name) for e in elements for name in e.attrs if name.startswith("on")]
    assert all(a.attrs["href"].startswith("#trend-") for a in dom.find_all("a"))
    (cases,) = dom.find_all("table", id="cases")
    shown = sorted(row.find_all("td")[0].all_text() for row in cases.find_all("tbody")[0].find_all("tr"))
    assert shown == sorted(visible(name) for name in HOSTILE)
    assert int(html.attrs["data-page-width"]) <= int(html.attrs["data-viewport"]) == VIEWPORT[0]


def _tags(page: str) -> list[str]:
    return sorted(f"{e.tag} {sorted(e.attrs)}" for e in parse_dom(page).iter())


@settings(max_examples=100, deadline=None)
@given(st.text(st.characters(codec=None, exclude_categories=()), min_size=1, max_size=60))
def test_no_name_changes_the_structure_of_the_page(name):
    """Any text as the test id, failure message, gate text and skipped test's id: the page has the same
    elements with the same attributes as with a plain name, and the name reads back as shown."""
    b = ProgramBuilder()
    b.op("aten::mm", [b.input("x", (16, 64)), b.input("w", (64, 64))], (16, 64), scope="s")
    view = case_view(case_report(b.build(), load_profile("a3")), "c", {"status": "new", "text": "t"})

    def page(text: str) -> str:
        return render_page([{**view, "case": text, "message": text, "gate": {"status": "new", "text": text}}],
                           tests=[{"nodeid": text, "outcome": "skipped", "message": text}])

    assert _tags(page(name)) == _tags(page("plain"))
    (summary,) = parse_dom(page(name)).find_all("table", id="summary")
    assert summary.find_all("td")[0].all_text() == visible(name)


def write_results(path, keys, variant_us):
    entry = baseline.Entry("max-autotune", 40.0, variant_us, 40.0 / variant_us, 1, 1, "v")
    results = baseline.Results(ModelIdentity("1", "c", (("a3", "p"),)), {key: {"a3": entry} for key in keys})
    path.write_text(baseline.dumps(results.to_json("baseline")))
    return path


def code_spans_removed(line: str) -> str:
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "CODE", line)


def test_markdown_of_hostile_test_ids_keeps_every_row_and_renders_none_of_them(tmp_path):
    old = write_results(tmp_path / "old.json", HOSTILE, 30.0)
    new = write_results(tmp_path / "new.json", HOSTILE, 36.0)
    text = comparison_formats.markdown(compare_runs([read_run(old), read_run(new)], 0.0))
    assert not hidden(text.replace("\n", ""))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    cells = {len(re.findall(r"(?<!\\)\|", line)) for line in rows}
    assert len(rows) == len(HOSTILE) + 1 and cells == {8}  # the header and one row per case, 7 cells each
    outside = "\n".join(code_spans_removed(line) for line in text.splitlines())
    assert not re.search(r"<(?!/?details>|/?summary>)|javascript:|\\x", outside)
    for name in HOSTILE:
        assert markdown_code(name, table=True) in text and markdown_code(f"{name} [a3]") in text


def test_the_csv_of_hostile_test_ids_keeps_one_row_each_and_no_formula(tmp_path):
    names = (*HOSTILE, "=HYPERLINK(\"http://x\",\"y\")", "+1", "-2+3", "@SUM(A1)")
    old = write_results(tmp_path / "old.json", names, 30.0)
    new = write_results(tmp_path / "new.json", names, 36.0)
    rows = list(csv.reader(io.StringIO(comparison_formats.to_csv(compare_runs([read_run(old), read_run(new)], 0.0)))))
    tests = [row[0] for row in rows[1:]]
    assert len(rows) == len(names) + 1 and sorted(tests) == sorted(spreadsheet_cell(name) for name in names)
    assert not [cell for cell in tests if cell[:1] in "=+-@"] and "'=HYPERLINK(\"http://x\",\"y\")" in tests


class Lines:
    """A terminal reporter that keeps what npufuse writes."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)


def test_the_terminal_table_and_the_compare_command_write_no_escape_sequence(tmp_path, capsys):
    row = {"target": "a3", "mode": "max-autotune", "baseline_us": 40.0, "variant_us": 30.0, "speedup": 1.333,
           "segments": 1, "streams": 1}
    tests = {f"t.py::test[{name}]": ("passed", [{**row, "key": f"t.py::test[{name}]"}]) for name in HOSTILE}
    terminal = Lines()
    results_table(terminal, tests, verbose=True)
    table = terminal.lines[1:-1]
    assert len(table) == len(HOSTILE) + 1 and not hidden("".join(terminal.lines))
    columns = {line.index("a3  ") for line in table[1:]}
    assert len(columns) == 1  # escaped before the columns are measured, so they line up

    old = write_results(tmp_path / "old.json", HOSTILE, 30.0)
    new = write_results(tmp_path / "new.json", HOSTILE, 36.0)
    assert main(["compare", str(old), str(new)]) == 1
    out, err = capsys.readouterr()
    assert not hidden(out.replace("\n", "")) and not hidden(err.replace("\n", ""))
    assert all(visible(name) in out for name in HOSTILE)


def test_a_failing_check_shows_hostile_scope_names_escaped(pytester):
    pytester.makepyfile(test_names='''
import pytest
import torch
from pytest_npufuse import torchair as tng

NAME = "\\x1b[2J\\x1b[32mall passed\\u202e<script>"


@pytest.mark.superkernel(scope=NAME, segments=1)
def test_scope(npufuse):
    def model(a, b):
        with tng.scope.super_kernel(NAME, ""):
            return (a @ b + 1.0) @ b
    npufuse.check(model, torch.ones(64, 64), torch.ones(64, 64))
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--npufuse-html=r.html")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert not hidden(output.replace("\n", "")) and "\\x1b[2J\\x1b[32mall passed\\u202e<script>" in output
    page = (pytester.path / "r.html").read_text()
    assert "<script>" not in page.replace("<script>", "", 1) and not hidden(page.replace("\n", ""))
    (message,) = parse_dom(page).find_all("pre", cls="message")
    assert "\\x1b[2J\\x1b[32mall passed\\u202e<script>" in message.all_text()


def test_a_hostile_scope_name_cannot_forge_a_plog_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(tmp_path))
    name = "sp1\n[ERROR] GE(1,python):2026-01-01-00:00:00.000000 [super_kernel_scope] forged\x1b[2K"
    path = write_plog([LogRecord("WARNING", "super_kernel_scope", f"scope {name} bypassed")])
    (line,) = path.read_text().splitlines()
    assert line.startswith("[WARNING] ") and line.endswith(f"scope {visible(name)} bypassed") and not hidden(line)


def test_a_plog_directory_that_cannot_be_created_is_named_with_the_variable(monkeypatch):
    """Under /proc nothing can be created: mkdir's FileNotFoundError escaped as a traceback."""
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", "/proc/npufuse-plog")
    with pytest.raises(OutputFileError) as exc:  # cannot be created
        write_plog([LogRecord("WARNING", "GE", "hello")])
    assert exc.value.file.startswith("/proc/npufuse-plog/")
