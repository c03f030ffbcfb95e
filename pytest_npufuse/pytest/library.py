"""What the ``npufuse`` fixture returns: the library bound to one test's target and markers.

Imported only when a test asks for the fixture (see :mod:`.fixture`): it loads torch and the pipeline.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, Callable

import pytest

from ..advisor import Advice, advise
from ..errors import ArgumentError, BaselineWarning, NpufuseError
from ..gate.baseline import Change, Entry
from ..gate.check_record import check_row
from ..gate.comparison import site_deltas
from ..gate.comparison_formats import located_lines
from ..report.verdict import Failure, Verdict, first_cause
from ..ir.lines import code_at
from ..pipeline.backend import compile_model
from ..pipeline.chain import compare_case
from ..pipeline.spec import CaseSpec, spec_of
from ..report.case import CaseReport
from ..report.escaping import terminal_text
from ..report.explain import failure_text
from ..report.html import case_view
from ..target.profile import HardwareProfile
from . import benchmark, recorder
from .failure import fail, or_fail
from .markers import checked, expectations_of
from .relocation import HeldWarnings
from .settings import settings_of
from .targets import item_key


_TEST_FIELDS = ("options", "trace_dir", "case", "affinity")
"""The spec's fields a test decides rather than its ``check`` call."""


class NpuFuse:
    """The ``npufuse`` fixture: the library bound to the current target and the test's markers."""

    def __init__(self, request: pytest.FixtureRequest, target: str) -> None:
        self._request = request
        self._settings = settings_of(request.config)
        self._target = self._settings.targets[target]
        self.target: HardwareProfile = self._target.profile
        self._expectations = or_fail(lambda: expectations_of(request.node))
        self._key = item_key(request.node)
        self._checks = 0

    def check(self, model: Callable[..., Any] | CaseSpec, *inputs: Any, **fields: Any) -> CaseReport:
        """Compile BASELINE and VARIANT, run both, compare every output bit for bit, apply the markers.

        Takes what :func:`~pytest_npufuse.compare` takes, a :class:`~pytest_npufuse.CaseSpec` or a model, its
        inputs and the spec's fields as keywords, except the four the test decides: the scopes' ``options``
        (its markers'), ``trace_dir`` (``--npufuse-trace-dir``), ``case`` (its node id) and ``affinity``.
        ``missing_ops``, when the spec leaves it open, comes from the markers or ``--npufuse-missing-ops``.
        Any unmet expectation fails the test with a diagnosis naming the scope, the op and the number.
        """
        settings = self._settings
        checked(self._request.node)
        with HeldWarnings() as held:
            try:
                report = compare_case(self._spec(model, inputs, fields), self._target)
                error = None
            except NpufuseError as exc:
                error = exc
        if error is not None:
            fail("\n".join([f"npufuse: {error.diagnosis}", *held.notes()]))
        entry, change = self._record(report)
        failures = self._expectations.failures(report)
        regression = settings.gate.failure(change) if settings.gate is not None and change is not None else None
        if regression:
            assert change is not None
            located = located_lines(site_deltas(change.before, change.after), _site_code(report))
            failures = first_cause([*failures, Failure(Verdict.REGRESSION, "\n".join([regression, *located]))])
        if not failures:
            held.release()
        if benchmark.is_mirrored(self._request.node):
            benchmark.mirror(self._request, report, entry, self._checks)
        if failures:
            known = change.before.break_keys() if change is not None and change.before is not None else None
            explain = bool(regression) or self._expectations.about_scopes_or_time(report)
            fail("\n".join([failure_text(report, failures, known, explain), *held.notes()]))
        return report

    def _spec(self, model: Callable[..., Any] | CaseSpec, inputs: tuple[Any, ...], fields: dict[str, Any]) -> CaseSpec:
        """The spec of this check: the user's, with what the test's markers and the run's options decide."""
        for name in _TEST_FIELDS:
            if name in fields:
                raise ArgumentError(
                    f"npufuse.check(..., {name}=...): the test decides {name} (its markers and the run's options); "
                    f"drop {name}=, or call pytest_npufuse.compare to choose it.", argument=name,
                )
        spec = spec_of(model, inputs, fields)
        expectations, settings = self._expectations, self._settings
        return replace(
            spec, options={**spec.options, **expectations.scope_options}, trace_dir=settings.trace_dir,
            case=self._case(self._checks + 1), affinity=expectations.affinity is not None or settings.advise,
            missing_ops=spec.missing_ops or expectations.missing_ops or settings.missing_ops,
        )

    def compile(self, model: Callable[..., Any], *, mode: str | None = None, superkernel: bool = True, multistream: bool = True) -> Callable[..., Any]:
        """A compiled callable for finer tests; its backend is at ``.npufuse_backend``."""
        compiled, backend = or_fail(
            lambda: compile_model(
                model, target=self._target, mode=mode, superkernel=superkernel, multistream=multistream,
            )
        )
        compiled.npufuse_backend = backend
        return compiled

    def advise(self, model: Callable[..., Any], *inputs: Any, options: str = "") -> Advice:
        """Rank SuperKernel scope layouts for ``model`` on this test's target and list the affinity-op
        findings (see :func:`pytest_npufuse.advise`); ``options`` go to every candidate scope."""
        return or_fail(lambda: advise(model, *inputs, target=self._target, options=options))

    def _record(self, report: CaseReport) -> tuple[Entry, Change | None]:
        """Attach this check's row to the item and judge it against the baseline if there is one."""
        self._checks += 1
        key = self._key if self._checks == 1 else f"{self._key} (check {self._checks})"
        entry = Entry.of(report, self._settings.model.for_target(report.target))
        gate = self._settings.gate
        change = gate.judge(key, report.target, entry) if gate is not None else None
        if gate is not None and change is not None and change.before is None and not gate.update:
            warnings.warn(BaselineWarning(terminal_text(gate.missing(change))), stacklevel=3)
        recorder.attach(self._request.node, check_row(key, report, entry, change))
        if self._settings.html_path is not None:
            self._keep_view(report, change)
        return entry, change

    def _keep_view(self, report: CaseReport, change: Change | None) -> None:
        """Hand the check's timelines to the run recorder for the HTML report."""
        gate = {"status": change.status, "text": change.describe()} if change is not None else None
        view = case_view(report, self._case(self._checks), gate)
        recorder.RunRecorder.of(self._request.config).add_view(self._request.node.nodeid, view)

    def _case(self, number: int) -> str:
        """The name of the test's ``number``-th check in traces and the HTML report: each check its own."""
        nodeid = self._request.node.nodeid
        return nodeid if number == 1 else f"{nodeid} (check {number})"


def _site_code(report: CaseReport) -> dict[str, str]:
    """The code of each op site's line in the VARIANT, by site key, for a regression's table."""
    attribution = report.attribution.get("variant")
    return {site.key: code_at(site.source) for site in (attribution.sites if attribution is not None else ())}
