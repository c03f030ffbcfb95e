"""The run recorder: every test's outcome and ``npufuse.check()`` rows, and after the run the baseline
gate's files and verdicts and the ``--npufuse-json`` report.

A check's row travels in the item's ``user_properties``, which pytest-xdist carries from every worker
to the controller (and JUnit XML shows), so aggregation happens once, on the controller (or in a serial
run).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest

from ..errors import NpufuseError
from ..files import locked_output
from ..files.kinds import fingerprint
from ..gate.baseline import Change, model_notice
from ..gate.run_document import entries_of, save_run_report
from ..report.numerics import shown_verdict
from . import terminal
from .environment import run_environment
from .settings import settings_of

_RECORD = "npufuse"
_JUNIT_PROPERTIES = ("target", "baseline_us", "variant_us", "speedup", "segments", "streams", "gate")


def attach(item: pytest.Item, row: dict[str, Any]) -> None:
    """Put a check's row on the item, for the recorder and, as flat properties, for JUnit XML."""
    item.user_properties.append((_RECORD, row))
    item.user_properties.extend((f"npufuse_{name}", row[name]) for name in _JUNIT_PROPERTIES if name in row)


def _records(report: pytest.TestReport) -> list[dict[str, Any]]:
    """The check rows a test report carries in its ``user_properties``."""
    return [row for key, row in report.user_properties if key == _RECORD]


def _outcome(report: pytest.TestReport, previous: str) -> str:
    """A test's outcome after one more phase report, in the words of pytest's summary line."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        return ("xfailed" if report.skipped else "xpassed") if xfail else report.outcome
    if report.failed:
        return "error"
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    return previous


class RunRecorder:
    """Every test's outcome and check rows; after the run, the baseline gate's files and verdicts.

    Workers report the model they used in ``workeroutput``, so the controller can refuse to mix numbers
    of two models; with ``--npufuse-html`` they send their checks' case views the same way (a view holds
    every kernel of both runs, too much to put in ``user_properties``, which JUnit XML copies).
    """

    _WORKER_MODEL = "npufuse_model"
    _WORKER_VIEWS = "npufuse_views"
    NAME = "npufuse-run"

    def __init__(self, config: pytest.Config, json_path: Path | None, html_path: Path | None = None) -> None:
        self.config = config
        self.json_path = json_path
        self.html_path = html_path
        self.tests: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.messages: dict[str, str] = {}
        self.durations: dict[str, float] = {}
        self.captured: dict[str, list[str]] = {}  # each test's captured output, by section
        self.views: dict[str, list[dict[str, Any]]] = {}
        self.changes: list[Change] = []
        self.lines: list[str] = []
        self.notes: list[str] = []
        self.errors: list[str] = []
        # The outputs as they were when the run started: one changed since was written by another process.
        self.seen = {path: fingerprint(path) for path in (json_path, html_path) if path is not None}

    @classmethod
    def of(cls, config: pytest.Config) -> RunRecorder:
        return config.pluginmanager.get_plugin(cls.NAME)

    def add_view(self, nodeid: str, view: dict[str, Any]) -> None:
        """Keep one check's case view for the HTML report."""
        self.views.setdefault(nodeid, []).append(view)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        previous, rows = self.tests.get(report.nodeid, ("passed", []))
        self.tests[report.nodeid] = (_outcome(report, previous), _records(report) or rows)
        message = _message(report)
        if message and report.nodeid not in self.messages:
            self.messages[report.nodeid] = message
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        # Each phase's report carries the output captured so far (setup, call, teardown): keep the last.
        sections = [f"----- {title} -----\n{text.rstrip()}" for title, text in report.sections if text.strip()]
        if sections:
            self.captured[report.nodeid] = sections

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        for nodeid, views in output.get(self._WORKER_VIEWS, {}).items():
            self.views.setdefault(nodeid, []).extend(views)
        model = output.get(self._WORKER_MODEL)
        if model is None:  # the worker checked nothing, so modeled nothing
            return
        mine = settings_of(self.config).model.to_json()
        if model != mine:
            self.errors.append(
                f"xdist worker {node.gateway.id} modeled with {model}, the controller with {mine}; "
                "workers must see the same profiles and op catalog (same rootdir and pyproject.toml)."
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            if any(rows for _, rows in self.tests.values()):
                self.config.workeroutput[self._WORKER_MODEL] = settings_of(self.config).model.to_json()
            self.config.workeroutput[self._WORKER_VIEWS] = self.views
            return
        if not self.errors:
            self._finish_gate()
        for flag, path, write in (("--npufuse-json", self.json_path, self._write_json),
                                  ("--npufuse-html", self.html_path, self._write_html)):
            if path is not None and not self.errors:
                why_not = self._nothing_to_write(path)
                if why_not:
                    self.notes.append(f"{flag} {path} was left as it was: {why_not}")
                else:
                    self._write(path, write)
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _finish_gate(self) -> None:
        gate = settings_of(self.config).gate
        if gate is None:
            return
        judged = [(outcome, gate.judge(key, target, entry)) for outcome, rows in self.tests.values()
                  for key, target, entry in entries_of(rows, "check record")]
        self.changes = sorted((change for _, change in judged), key=lambda change: (change.key, change.target))
        notice = model_notice(self.changes, gate.model, gate.stored.model)
        if notice and not gate.update:
            self.lines.append(f"{notice}; run with --npufuse-update-baseline and commit {gate.path}.")
        passed = [change for outcome, change in judged if outcome == "passed"]
        self._write(gate.path, lambda: self._save_baseline(passed))

    def _save_baseline(self, changes: list[Change]) -> None:
        gate = settings_of(self.config).gate
        assert gate is not None
        update = gate.save(changes)
        concurrent = update.describe(gate.path)
        if concurrent:
            self.lines.append(concurrent)
        if update.results is not None:
            self.lines.append(f"wrote {gate.path}")

    def _nothing_to_write(self, path: Path) -> str | None:
        """Why this run must leave the report at ``path`` alone: a run that ran nothing (collect-only, every
        test deselected) or checked nothing would otherwise replace the last real report with an empty one."""
        if not self.tests:
            return "no test ran (collect-only, or every test deselected or skipped at collection)"
        if not any(rows for _, rows in self.tests.values()) and fingerprint(path) is not None:
            return "no test called npufuse.check(), so there was nothing to report"
        return None

    def _write_json(self) -> None:
        settings = settings_of(self.config)
        gate = settings.gate
        described = None
        if gate is not None:
            described = {"file": str(gate.path), "tolerance_pct": gate.tolerance_pct, "update": gate.update}
        assert self.json_path is not None
        seen = self.seen[self.json_path]
        self.notes.extend(save_run_report(self.json_path, settings.model, self.tests, described, seen))

    def _write_html(self) -> None:
        """The HTML report: every check, the tests that made none (skipped ones with their reason), and
        the environment that produced the numbers. An HTML page cannot be merged: one another process
        wrote during this run is replaced, saying so."""
        path = self.html_path
        assert path is not None
        others = [
            {"nodeid": nodeid, "outcome": outcome, "message": self.messages.get(nodeid, "")}
            for nodeid, (outcome, _) in sorted(self.tests.items()) if nodeid not in self.views
        ]
        settings = settings_of(self.config)
        environment = run_environment(Path(self.config.rootpath), dict(settings.profiles), settings.model)
        with locked_output(path, "HTML report") as regular:
            if regular and fingerprint(path) not in (None, self.seen[path]):
                self.notes.append(
                    f"replaced the HTML report {path}, which another process wrote during this run (HTML reports "
                    "are not merged; give each run its own --npufuse-html, or merge --npufuse-json reports)"
                )
            _html_writer()(path, self._views(), others, environment)
        self.notes.append(f"wrote {path}")

    def _views(self) -> list[dict[str, Any]]:
        """Every check's view, worst first as the terminal table lists them, with its test's outcome, failure
        message, duration (all phases, in seconds, as pytest measured them) and captured output: a serial
        run and a pytest-xdist run write the same page (but for the durations)."""
        views = [
            {**view, "verdict": shown_verdict(self.tests.get(nodeid, ("unknown", []))[0], view.get("numerics")),
             "message": self.messages.get(nodeid, ""), "duration_s": round(self.durations.get(nodeid, 0.0), 3),
             "captured": "\n".join(self.captured.get(nodeid, []))}
            for nodeid in sorted(self.views) for view in self.views[nodeid]
        ]
        return sorted(views, key=lambda view: terminal.worst_first(
            view["verdict"], view["gate"]["status"] if view["gate"] else "", view["speedup"], view["case"], view["target"]
        ))

    def _write(self, path: Path, write: Callable[[], None]) -> None:
        """Write one output; a failure is reported in the summary and fails the run, never a traceback
        out of ``pytest_sessionfinish`` (the old file, if any, is left as it was)."""
        try:
            write()
        except NpufuseError as exc:
            self.errors.append(str(exc))
        except (OSError, ValueError) as exc:
            self.errors.append(f"could not write {path}: {exc}; the file was left as it was.")

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        terminal.results_table(terminalreporter, self.tests, verbose=config.option.verbose > 0)
        terminal.gains_section(terminalreporter, self.tests)
        terminal.contributions_section(terminalreporter, self.tests)
        if settings_of(config).advise:
            terminal.advise_section(terminalreporter, self.tests)
        terminal.gate_section(terminalreporter, settings_of(config).gate, self.changes, self.lines, self.errors)
        terminal.notes_section(terminalreporter, self.notes)


# pytest-xdist opens a worker's failure text with the worker and its Python; the report names neither.
_XDIST_HEADER = re.compile(r"\A\[gw\d+\] .* -- Python .*\n")


def _message(report: pytest.TestReport) -> str:
    """What a person needs from a phase report: a failure's text, a skip's or an xfail's reason."""
    if report.failed:
        return _XDIST_HEADER.sub("", report.longreprtext, count=1)
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}" if report.wasxfail else "xfail"
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return ""


def _html_writer() -> Callable[..., None]:
    """The HTML report's writer, loaded only for a run that asks for the report (the plugin loads on
    every pytest run and keeps its start-up cost near zero)."""
    from ..report.html import write_html_report

    return write_html_report
