"""The pytest plugin: command-line options, markers and fixtures mapped onto the library.

Everything that models the NPU lives in the library (:mod:`pytest_npufuse.pipeline`); this module only
reads options and markers, turns a :class:`CaseReport` into pass, fail or skip, and prints the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from . import pipeline
from .errors import NpufuseError
from .catalog import OpCatalog
from .expectations import SuperKernelExpectation, parse_superkernel, precision_failures, run_failures
from .hardware import HardwareProfile
from .host import HostConfig
from .userconfig import UserConfig, load_user_config
from .report import CaseReport

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


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    names = [name.strip() for name in (config.getoption("npu_target") or config.getini("npu_target")).split(",")]
    if not all(names):
        raise pytest.UsageError(f"--npu-target: empty target name in {','.join(names)!r}; use e.g. a3 or a2,a3.")
    try:
        user = _user_config(config)
        config.stash[_PROFILES] = {name: user.profile(name) for name in names}
        config.stash[_CATALOG] = user.catalog()
    except NpufuseError as exc:
        raise pytest.UsageError(f"npufuse: {exc}") from None
    config.pluginmanager.register(SummaryTable(), "npufuse-summary")


_PROFILES = pytest.StashKey[dict[str, HardwareProfile]]()
_CATALOG = pytest.StashKey[OpCatalog]()


def _option(config: pytest.Config, name: str) -> str:
    """A path option: the command line wins over the ini key; empty means unset."""
    return config.getoption(name) or config.getini(name) or ""


def _user_config(config: pytest.Config) -> UserConfig:
    """``[tool.npufuse]`` of the rootdir's pyproject.toml, plus the ``--npufuse-profile`` file."""
    user = load_user_config(Path(config.rootpath) / "pyproject.toml")
    profile_file = _option(config, "npufuse_profile")
    return user.with_profile_file(Path(profile_file)) if profile_file else user


def pytest_report_header(config: pytest.Config) -> str:
    profiles = config.stash[_PROFILES]
    return "npufuse: " + ", ".join(f"{name} = {p.product} (profile {p.digest})" for name, p in profiles.items())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """With several targets, every test that uses npufuse or npu_target runs once per target."""
    names = list(metafunc.config.stash[_PROFILES])
    wants = {"npufuse", "npu_target"} & set(metafunc.fixturenames)
    if wants and len(names) > 1:
        metafunc.parametrize("npu_target", names, indirect=True, ids=names)


def _item_target(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "npu_target" in callspec.params:
        return callspec.params["npu_target"]
    return next(iter(item.config.stash[_PROFILES]))


def _superkernel_expectations(item: pytest.Item) -> list[SuperKernelExpectation]:
    return [parse_superkernel(mark.args, mark.kwargs) for mark in item.iter_markers("superkernel")]


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate markers before the test runs and skip, visibly, what the target cannot run."""
    target = _item_target(item)
    target_marker = item.get_closest_marker("npu_target")
    if target_marker is not None:
        if not target_marker.args or not all(isinstance(a, str) for a in target_marker.args):
            pytest.fail(f"npu_target marker needs target names, e.g. @pytest.mark.npu_target('a3'); got {target_marker.args!r}.", pytrace=False)
        if target not in target_marker.args:
            pytest.skip(f"runs only on {', '.join(target_marker.args)}; the current target is {target}")
    if item.get_closest_marker("multistream") is not None:
        pytest.fail(
            "multistream marker: in-graph multi-stream execution is not modeled by this version of pytest-npufuse; "
            "the test cannot check it.",
            pytrace=False,
        )
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
        trace_dir = _option(config, "npufuse_trace_dir") or None
        report = _or_fail(
            lambda: pipeline.compare(
                model, *inputs, target=self.target, mode=mode, reference=reference, options=options,
                catalog=config.stash[_CATALOG], dynamic=dynamic, host=host, trace_dir=trace_dir,
                case=self._request.node.nodeid,
            )
        )
        self._record(report)
        failures = run_failures(report, self._expectations) + precision_failures(report)
        for expectation in self._expectations:
            failures.extend(expectation.failures(report))
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

    def _record(self, report: CaseReport) -> None:
        row = {
            "target": report.target,
            "mode": report.mode,
            "baseline_us": round(report.baseline.time_us, 3),
            "variant_us": round(report.variant.time_us, 3),
            "speedup": round(report.speedup, 4),
            "segments": report.segments,
            "streams": len(report.streams),
            "bit_exact": report.bit_exact,
            "host_us": round(report.variant.host_us, 3),
            "device_us": round(report.variant.device_us, 3),
            "bound": report.variant.bound,
        }
        self._request.node.user_properties.append((_RECORD, row))


@pytest.fixture
def npu_target(request: pytest.FixtureRequest) -> str:
    """The name of the NPU target this test runs against (see --npu-target)."""
    return getattr(request, "param", None) or next(iter(request.config.stash[_PROFILES]))


@pytest.fixture
def npufuse(request: pytest.FixtureRequest, npu_target: str) -> NpuFuse:
    """Compile, run and check models against the modeled target; see NpuFuse.check."""
    return NpuFuse(request, npu_target)


class SummaryTable:
    """Collects one row per checked case and prints the table at the end of the run.

    Rows travel in ``user_properties``, so under pytest-xdist they reach the controller with each test
    report and the table is printed once, there.
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            for key, row in report.user_properties:
                if key == _RECORD:
                    self.rows.append({"case": report.nodeid, **row, "verdict": report.outcome})

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if not self.rows or hasattr(config, "workerinput"):
            return
        terminalreporter.section("npufuse: modeled NPU results")
        header = ("case", "target", "mode", "baseline us", "variant us", "speedup", "segments", "streams", "bound", "verdict")
        table = [header] + [_cells(row) for row in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        for row in table:
            terminalreporter.write_line("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    return (
        row["case"],
        row["target"],
        row["mode"],
        f"{row['baseline_us']:.1f}",
        f"{row['variant_us']:.1f}",
        f"{row['speedup']:.3f}x",
        str(row["segments"]),
        str(row["streams"]),
        row["bound"],
        row["verdict"],
    )
