"""The pytest plugin: command-line options, markers and fixtures mapped onto the library.

Everything that models the NPU lives in the library (:mod:`pytest_npufuse.pipeline`); this module only
reads options and markers, turns a :class:`CaseReport` into pass, fail or skip, and prints the summary.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

from . import modeledclock, pipeline
from .baseline import (
    BaselineWarning, Change, Entry, Gate, aligned, count_line, finite_us, model_notice, parse_percent, write_baseline,
)
from .errors import NpufuseError
from .catalog import OpCatalog
from .expectations import (
    MultiStreamExpectation,
    SuperKernelExpectation,
    parse_multistream,
    parse_superkernel,
    precision_failures,
    run_failures,
)
from .hardware import HardwareProfile
from .host import HostConfig
from .modelversion import ModelIdentity
from .userconfig import UserConfig, load_user_config
from .report import CaseReport
from .syncs import EVENTS
from .runreport import entries_of, run_document, write_run_report

_RECORD = "npufuse"
_MARKERS = (
    "superkernel(scope, *, min_speedup=None, segments=None, outcome='fused', breaks=None, options=None): "
    "expectations about one SuperKernel scope, checked by npufuse.check(); stack markers for several scopes. "
    "outcome is one of fused, unfused, bypassed, aborted, hang, unsupported; breaks lists the op types "
    "(e.g. 'aten::add') expected to split the scope; options replaces the scope's options string.",
    "multistream(*, streams=None, min_speedup=None, race_free=True): expectations about in-graph multi-stream "
    "execution, checked by npufuse.check().",
    "npu_target(*names): run this test only on these NPU targets (e.g. 'a3'); it is skipped on the others.",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("npufuse", "pytest-npufuse: modeled Ascend NPU SuperKernel and multi-stream checks")
    group.addoption(
        "--npu-target",
        dest="npu_target",
        default=None,
        help="NPU target(s) to model: a2, a3, a profile .toml path, or a comma list such as a2,a3 that runs every "
        "npufuse test once per target (ini: npu_target; default a3).",
    )
    parser.addini("npu_target", "Default for --npu-target.", default="a3")
    group.addoption(
        "--npufuse-trace-dir",
        dest="npufuse_trace_dir",
        default=None,
        help="write a Perfetto trace (trace_view.json) and kernel_details.csv per case and variant under this "
        "directory (ini: npufuse_trace_dir).",
    )
    parser.addini("npufuse_trace_dir", "Default for --npufuse-trace-dir.", default="")
    group.addoption(
        "--npufuse-profile",
        dest="npufuse_profile",
        default=None,
        help="a TOML file of hardware profiles: one complete profile, or [targets.NAME] tables that add targets or "
        "override built-in ones key by key; name them with --npu-target (ini: npufuse_profile).",
    )
    parser.addini("npufuse_profile", "Default for --npufuse-profile.", default="")
    group.addoption(
        "--npufuse-baseline",
        dest="npufuse_baseline",
        default=None,
        metavar="FILE",
        help="CI gate: compare each checked case's modeled variant time with its entry in this baseline JSON file; "
        "a slower case fails, a missing entry is recorded with a warning (ini: npufuse_baseline).",
    )
    parser.addini("npufuse_baseline", "Default for --npufuse-baseline (relative to the ini file).", default="")
    group.addoption(
        "--npufuse-update-baseline",
        dest="npufuse_update_baseline",
        action="store_true",
        default=None,
        help="Rewrite the baseline entries of the tests that ran (others are kept) instead of failing on a "
        "regression (ini: npufuse_update_baseline).",
    )
    parser.addini("npufuse_update_baseline", "Default for --npufuse-update-baseline.", type="bool", default=False)
    group.addoption(
        "--npufuse-tolerance",
        dest="npufuse_tolerance",
        default=None,
        metavar="PCT",
        help="Percent by which a modeled time may exceed its baseline before the test fails "
        "(ini: npufuse_tolerance; default 0: modeled times are exact).",
    )
    parser.addini("npufuse_tolerance", "Default for --npufuse-tolerance.", default="0")
    group.addoption(
        "--npufuse-json",
        dest="npufuse_json",
        default=None,
        metavar="FILE",
        help="Write the whole run (every outcome and modeled result, schema_version, model_version) to this JSON "
        "file (ini: npufuse_json).",
    )
    parser.addini("npufuse_json", "Default for --npufuse-json (relative to the ini file).", default="")


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    names = [name.strip() for name in (config.getoption("npu_target") or config.getini("npu_target")).split(",")]
    if not all(names):
        raise pytest.UsageError(f"--npu-target: empty target name in {','.join(names)!r}; use e.g. a3 or a2,a3.")
    try:
        user = _user_config(config)
        user.check_targets()
        config.stash[_PROFILES] = _by_name([user.profile(name) for name in names], names)
        config.stash[_CATALOG] = user.catalog()
    except NpufuseError as exc:
        raise pytest.UsageError(f"npufuse: {exc}") from None
    trace_dir = _path_setting(config, "npufuse_trace_dir")
    if trace_dir is not None and trace_dir.exists() and not trace_dir.is_dir():
        raise pytest.UsageError(f"--npufuse-trace-dir {trace_dir}: is a file; give a directory (it is created if missing).")
    config.stash[_TRACE_DIR] = trace_dir
    model = ModelIdentity.of(config.stash[_PROFILES].values(), config.stash[_CATALOG])
    config.stash[_MODEL] = model
    config.stash[_GATE] = _open_gate(config, model)
    config.pluginmanager.register(RunRecorder(config, _path_setting(config, "npufuse_json")), "npufuse-run")


_PROFILES = pytest.StashKey[dict[str, HardwareProfile]]()


def _by_name(profiles: list[HardwareProfile], given: list[str]) -> dict[str, HardwareProfile]:
    """The profiles keyed by their own names, which reports, markers and baselines use, even when one
    was given as a file path; two that share a name would be indistinguishable in all of them."""
    by_name: dict[str, HardwareProfile] = {}
    for profile, text in zip(profiles, given):
        if profile.name in by_name:
            raise NpufuseError(f"--npu-target: {text!r} is target '{profile.name}' again; give each target once.")
        by_name[profile.name] = profile
    return by_name
_CATALOG = pytest.StashKey[OpCatalog]()
_TRACE_DIR = pytest.StashKey["Path | None"]()


def _user_config(config: pytest.Config) -> UserConfig:
    """``[tool.npufuse]`` of the rootdir's pyproject.toml, plus the ``--npufuse-profile`` file."""
    user = load_user_config(Path(config.rootpath) / "pyproject.toml")
    profile_file = _path_setting(config, "npufuse_profile")
    return user.with_profile_file(profile_file) if profile_file else user


_MODEL = pytest.StashKey[ModelIdentity]()
_GATE = pytest.StashKey["Gate | None"]()
_CLOCK = pytest.StashKey["modeledclock.ModeledClock | None"]()


def _path_setting(config: pytest.Config, name: str) -> Path | None:
    """A file option: as given on the command line, or its ini value relative to the ini file."""
    given = config.getoption(name)
    if given:
        return Path(given)
    value = config.getini(name)
    if not value:
        return None
    return (config.inipath.parent if config.inipath else config.rootpath) / value


def _tolerance(config: pytest.Config) -> float:
    text = str(config.getoption("npufuse_tolerance") or config.getini("npufuse_tolerance")).strip()
    value = parse_percent(text)
    if value is None:
        raise pytest.UsageError(f"--npufuse-tolerance: {text!r} is not a percentage >= 0; use e.g. 0 or 2.5.")
    return value


def _open_gate(config: pytest.Config, model: ModelIdentity) -> Gate | None:
    """Read the baseline once, read-only, in every process; a bad file stops the run before any test."""
    path = _path_setting(config, "npufuse_baseline")
    update = bool(config.getoption("npufuse_update_baseline") or config.getini("npufuse_update_baseline"))
    tolerance = _tolerance(config)
    if path is None:
        if update:
            raise pytest.UsageError("--npufuse-update-baseline needs --npufuse-baseline FILE: the file to rewrite.")
        return None
    try:
        return Gate.open(path, tolerance, update, model)
    except NpufuseError as exc:
        raise pytest.UsageError(f"--npufuse-baseline: {exc}") from None


def pytest_itemcollected(item: pytest.Item) -> None:
    """The pytest-benchmark mirror: a test taking ``npufuse`` and ``benchmark`` is timed on a modeled clock.

    The clock goes in as the ``timer`` of the item's benchmark marker (keeping the marker's other
    settings); pytest-benchmark reads the marker when it builds the fixture. The stash says whether the
    test is mirrored: a clock, or None when the marker sets a timer of its own (a ``benchmark`` fixture
    of some other plugin is left alone).
    """
    if not {"npufuse", "benchmark"} <= set(getattr(item, "fixturenames", ())):
        return
    if not item.config.pluginmanager.hasplugin("benchmark"):
        return
    marker = item.get_closest_marker("benchmark")
    settings = dict(marker.kwargs) if marker else {}
    if "timer" in settings:
        item.stash[_CLOCK] = None
        return
    clock = modeledclock.ModeledClock()
    item.stash[_CLOCK] = clock
    item.add_marker(pytest.mark.benchmark(**settings, timer=clock), append=False)


def pytest_report_header(config: pytest.Config) -> str:
    profiles = config.stash[_PROFILES]
    return "npufuse: " + ", ".join(f"{name} = {p.product} (profile {p.digest})" for name, p in profiles.items())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With several targets, every test that uses npufuse or npu_target runs once per target."""
    names = list(metafunc.config.stash[_PROFILES])
    wants = {"npufuse", "npu_target"} & set(metafunc.fixturenames)
    if wants and len(names) > 1:
        metafunc.parametrize("npu_target", names, indirect=True, ids=names)


def _test_key(item: pytest.Item) -> str:
    """The node id without the target's parameter id, so a test keeps its baseline entry (which is
    keyed by target anyway) whether one target runs or several."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "npu_target" not in callspec.params:
        return item.nodeid
    ids = list(callspec._idlist)
    ids.remove(callspec.params["npu_target"])
    base = item.nodeid[: -len(callspec.id) - 2]
    return f"{base}[{'-'.join(ids)}]" if ids else base


def _item_target(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "npu_target" in callspec.params:
        return callspec.params["npu_target"]
    return next(iter(item.config.stash[_PROFILES]))


def _superkernel_expectations(item: pytest.Item) -> list[SuperKernelExpectation]:
    return [parse_superkernel(mark.args, mark.kwargs) for mark in item.iter_markers("superkernel")]


def _multistream_expectation(item: pytest.Item) -> MultiStreamExpectation:
    """The multistream marker, or its defaults: every test is checked for races, marker or not."""
    mark = item.get_closest_marker("multistream")
    return parse_multistream(mark.args, mark.kwargs) if mark is not None else MultiStreamExpectation()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate markers before the test runs and skip, visibly, what the target cannot run.

    Tagged events are registered per process in TorchAir; each test starts with none, so a model built
    in several (parametrized, repeated, or xdist-reused) tests does not collide with itself.
    """
    EVENTS.reset()
    target = _item_target(item)
    target_marker = item.get_closest_marker("npu_target")
    if target_marker is not None:
        if not target_marker.args or not all(isinstance(a, str) for a in target_marker.args):
            pytest.fail(f"npu_target marker needs target names, e.g. @pytest.mark.npu_target('a3'); got {target_marker.args!r}.", pytrace=False)
        if target not in target_marker.args:
            pytest.skip(f"runs only on {', '.join(target_marker.args)}; the current target is {target}")
    _or_fail(lambda: _multistream_expectation(item))
    expectations = _or_fail(lambda: _superkernel_expectations(item))
    profile = item.config.stash[_PROFILES][target]
    if not profile.superkernel_supported and any(e.outcome == "fused" for e in expectations):
        pytest.skip(f"SuperKernel is not supported on {profile.product} (target {target}); this test expects 'fused'")


def _or_fail(action: Callable[[], Any]) -> Any:
    """Run ``action``; an NpufuseError fails the test with its message alone, outside the ``except``
    block so pytest shows no chained traceback from deep inside torch."""
    try:
        return action()
    except NpufuseError as exc:
        message = f"npufuse: {exc}"
    pytest.fail(message, pytrace=False)


class NpuFuse:
    """The ``npufuse`` fixture: the library bound to the current target and the test's markers."""

    def __init__(self, request: pytest.FixtureRequest, target: str) -> None:
        self._request = request
        self.target: HardwareProfile = request.config.stash[_PROFILES][target]
        self._expectations = _superkernel_expectations(request.node)
        self._multistream = _multistream_expectation(request.node)
        self._key = _test_key(request.node)
        self._checks = 0

    def check(
        self,
        model: Callable[..., Any],
        *inputs: Any,
        mode: str | None = None,
        reference: Callable[..., Any] | None = None,
        dynamic: bool = False,
        host: HostConfig | None = None,
    ) -> CaseReport:
        """Compile BASELINE and VARIANT, run both, compare every output bit for bit, apply the markers.

        ``mode`` is a TorchAir mode or ``"eager"``; ``dynamic=True`` models host scheduling and
        ``host`` its threads and optimisations. Any unmet expectation fails the test with a diagnosis
        naming the scope, the op and the number.
        """
        options = {e.scope: e.options for e in self._expectations if e.options is not None}
        config = self._request.config
        report = _or_fail(
            lambda: pipeline.compare(
                model, *inputs, target=self.target, mode=mode, reference=reference, options=options,
                catalog=config.stash[_CATALOG], dynamic=dynamic, host=host, trace_dir=config.stash[_TRACE_DIR],
                case=self._request.node.nodeid,
            )
        )
        entry, change = self._record(report)
        streams = self._multistream
        failures = run_failures(report, self._expectations, streams) + precision_failures(report, streams)
        failures += streams.failures(report)
        for expectation in self._expectations:
            failures.extend(expectation.failures(report))
        gate = self._request.config.stash[_GATE]
        if gate is not None and change is not None:
            regression = gate.failure(change)
            failures.extend([regression] if regression else [])
        if _CLOCK in self._request.node.stash:
            self._mirror(report, entry)
        if failures:
            pytest.fail(f"npufuse ({report.summary()}):\n" + "\n".join(f"- {f}" for f in failures), pytrace=False)
        return report

    def compile(self, model: Callable[..., Any], *, mode: str | None = None, superkernel: bool = True, multistream: bool = True) -> Callable[..., Any]:
        """A compiled callable for finer tests; its backend is at ``.npufuse_backend``."""
        compiled, backend = _or_fail(
            lambda: pipeline.compile_model(
                model, target=self.target, mode=mode, superkernel=superkernel, multistream=multistream,
                catalog=self._request.config.stash[_CATALOG],
            )
        )
        compiled.npufuse_backend = backend
        return compiled

    def _record(self, report: CaseReport) -> tuple[Entry, Change | None]:
        """Add this check's row to the item's ``user_properties``, which carry it to the controller under
        pytest-xdist and into JUnit XML, and judge it against the baseline if there is one."""
        self._checks += 1
        key = self._key if self._checks == 1 else f"{self._key} (check {self._checks})"
        entry = Entry.of(report, self._request.config.stash[_MODEL].for_target(report.target))
        row: dict[str, Any] = {
            "key": key,
            "target": report.target,
            **entry.to_json(),
            "bit_exact": report.bit_exact,
            "host_us": round(report.variant.host_us, 3),
            "device_us": finite_us(report.variant.device_us),
            "bound": report.variant.bound,
        }
        gate = self._request.config.stash[_GATE]
        change = gate.judge(key, report.target, entry) if gate is not None else None
        if change is not None:
            row["gate"] = change.status
            if change.before is None and not gate.update:
                warnings.warn(BaselineWarning(gate.missing(change)), stacklevel=3)
        properties = self._request.node.user_properties
        properties.append((_RECORD, row))
        properties.extend((f"npufuse_{name}", row[name]) for name in _JUNIT_PROPERTIES if name in row)
        return entry, change

    def _mirror(self, report: CaseReport, entry: Entry) -> None:
        """Let the test's ``benchmark`` fixture measure the VARIANT's modeled device time."""
        clock = self._request.node.stash[_CLOCK]
        if clock is None:
            pytest.fail(
                "npufuse: this test takes `benchmark`, whose marker sets its own timer=; the npufuse benchmark "
                "mirror times modeled device time with its own clock. Remove timer= from @pytest.mark.benchmark.",
                pytrace=False,
            )
        if self._checks > 1:
            pytest.fail(
                "npufuse: pytest-benchmark records one measurement per test and the benchmark mirror measured the "
                "first npufuse.check(); put each further check in a test of its own.",
                pytrace=False,
            )
        if entry.variant_us is None:
            pytest.fail(f"npufuse: the benchmark mirror cannot time a VARIANT that does not finish ({report.variant.failure}).", pytrace=False)
        info = {"npufuse_target": report.target, "npufuse_mode": report.mode, "npufuse_baseline_us": entry.baseline_us,
                "npufuse_speedup": entry.speedup, "npufuse_model_version": entry.model_version}
        modeledclock.measure(self._request.getfixturevalue("benchmark"), clock, entry.variant_us, info)


@pytest.fixture
def npu_target(request: pytest.FixtureRequest) -> str:
    """The name of the NPU target this test runs against (see --npu-target)."""
    return getattr(request, "param", None) or next(iter(request.config.stash[_PROFILES]))


@pytest.fixture
def npufuse(request: pytest.FixtureRequest, npu_target: str) -> NpuFuse:
    """Compile, run and check models against the modeled target; see NpuFuse.check."""
    return NpuFuse(request, npu_target)


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    return (
        row["case"],
        row["target"],
        row["mode"],
        f"{row['baseline_us']:.1f}",
        "inf" if row["variant_us"] is None else f"{row['variant_us']:.1f}",
        f"{row['speedup']:.3f}x",
        str(row["segments"]),
        str(row["streams"]),
        row["bound"],
        row["verdict"],
    )


_JUNIT_PROPERTIES = ("target", "baseline_us", "variant_us", "speedup", "segments", "streams", "gate")


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

    Rows reach it in ``user_properties`` from every xdist worker, so everything here happens once, on
    the controller (or in a serial run); workers only report the model they used, in ``workeroutput``,
    so the controller can refuse to mix numbers of two models.
    """

    _WORKER_MODEL = "npufuse_model"

    def __init__(self, config: pytest.Config, json_path: Path | None) -> None:
        self.config = config
        self.json_path = json_path
        self.tests: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.changes: list[Change] = []
        self.lines: list[str] = []
        self.errors: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        previous, rows = self.tests.get(report.nodeid, ("passed", []))
        self.tests[report.nodeid] = (_outcome(report, previous), _records(report) or rows)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        model = getattr(node, "workeroutput", {}).get(self._WORKER_MODEL)
        mine = self.config.stash[_MODEL].to_json()
        if model is not None and model != mine:
            self.errors.append(
                f"xdist worker {node.gateway.id} modeled with {model}, the controller with {mine}; "
                "workers must see the same profiles and op catalog (same rootdir and pyproject.toml)."
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput[self._WORKER_MODEL] = self.config.stash[_MODEL].to_json()
            return
        if not self.errors:
            self._finish_gate()
        if self.json_path is not None and not self.errors:
            self._write(self.json_path, lambda: write_run_report(self.json_path, self._document()))
        if self.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _finish_gate(self) -> None:
        gate = self.config.stash[_GATE]
        if gate is None:
            return
        judged = [(outcome, gate.judge(key, target, entry)) for outcome, rows in self.tests.values()
                  for key, target, entry in entries_of(rows, "check record")]
        self.changes = sorted((change for _, change in judged), key=lambda change: (change.key, change.target))
        notice = model_notice(self.changes, gate.model, gate.stored.model)
        if notice and not gate.update:
            self.lines.append(f"{notice}; run with --npufuse-update-baseline and commit {gate.path}.")
        updated = gate.updated([change for outcome, change in judged if outcome == "passed"])
        if updated is not None:
            self._write(gate.path, lambda: write_baseline(gate.path, updated))
            self.lines.append(f"wrote {gate.path}")

    def _results_table(self, terminalreporter: Any) -> None:
        """One row per check, with its test's outcome; sorted by test, so a pytest-xdist run, whose
        reports arrive in any order, prints the same table."""
        rows = [
            _cells({"case": nodeid, **row, "verdict": self.tests[nodeid][0]})
            for nodeid in sorted(self.tests) for row in self.tests[nodeid][1]
        ]
        if not rows:
            return
        terminalreporter.section("npufuse: modeled NPU results")
        header = ("case", "target", "mode", "baseline us", "variant us", "speedup", "segments", "streams", "bound", "verdict")
        for line in aligned([header, *rows]):
            terminalreporter.write_line(line)

    def _document(self) -> dict[str, Any]:
        gate = self.config.stash[_GATE]
        settings = None
        if gate is not None:
            settings = {"file": str(gate.path), "tolerance_pct": gate.tolerance_pct, "update": gate.update}
        return run_document(self.config.stash[_MODEL], self.tests, settings)

    def _write(self, path: Path, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as exc:
            self.errors.append(f"could not write {path}: {exc}")

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        self._results_table(terminalreporter)
        gate = config.stash[_GATE]
        if gate is None and not self.errors:
            return
        title = "npufuse: baseline gate"
        if gate is not None:
            title += f" ({gate.path}, tolerance {gate.tolerance_pct:g}%{', updating' if gate.update else ''})"
        terminalreporter.section(title)
        for change in self.changes:
            if change.status != "unchanged":
                terminalreporter.write_line(f"{change.status:<13} {change.describe()}")
        if self.changes:
            terminalreporter.write_line(count_line(self.changes))
        for line in self.lines:
            terminalreporter.write_line(line)
        for error in self.errors:
            terminalreporter.write_line(f"npufuse error: {error}", red=True)
