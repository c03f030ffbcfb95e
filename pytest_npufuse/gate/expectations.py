"""Expectations a test states about a case (the ``superkernel`` marker), checked against a CaseReport.

Parsing validates every argument up front, so a typo in a marker is a usage error naming the argument,
never a silent pass; checking returns one sentence per unmet expectation, naming the scope, the op and
the number.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import MarkerError
from ..plan.tasks import ScopeOutcome, broken_by
from ..sanitize.checker import RaceKind
from ..vocabulary import MissingOps
from ..report.verdict import Failure, Verdict

if TYPE_CHECKING:
    from ..report.case import CaseReport

OUTCOMES = tuple(ScopeOutcome)
_SUPERKERNEL_KWARGS = ("scope", "min_speedup", "segments", "outcome", "breaks", "options", "missing_ops")


@dataclass(frozen=True)
class SuperKernelExpectation:
    """``@pytest.mark.superkernel(scope, *, min_speedup, segments, outcome, breaks, options, missing_ops)``."""

    scope: str
    min_speedup: float | None = None
    segments: int | None = None
    outcome: str = "fused"
    breaks: tuple[str, ...] | None = None
    options: str | None = None
    missing_ops: str | None = None

    def failures(self, report: CaseReport) -> list[Failure]:
        """Each unmet expectation as a sentence; empty when the case meets them all."""
        scope = report.superkernels.get(self.scope)
        if scope is None:
            return [Failure(
                Verdict.OUTCOME, f"{report.scope_not_found(self.scope)}; check the scope name in the model and in the marker."
            )]
        failures: list[Failure] = []
        if scope.outcome != self.outcome:
            why = f" ({scope.reason})" if scope.reason else ""
            verdict = Verdict.HANG if scope.outcome == ScopeOutcome.HANG else Verdict.OUTCOME
            failures.append(Failure(verdict, f"scope '{self.scope}': outcome is '{scope.outcome}'{why}, expected '{self.outcome}'."))
        if self.segments is not None and scope.segments != self.segments:
            broken = scope.segments > self.segments or bool(scope.break_points or scope.splits)
            verdict = Verdict.SCOPE_BREAK if broken else Verdict.OUTCOME
            failures.append(Failure(verdict, self._segments_failure(scope.segments, broken_by(scope.break_points), scope.splits)))
        if self.breaks is not None and sorted(scope.breaks) != sorted(self.breaks):
            sites = broken_by(scope.break_points) or "no op"
            failures.append(Failure(Verdict.SCOPE_BREAK, f"scope '{self.scope}' was broken by {sites}; expected breaks={list(self.breaks)}."))
        own = report.scope_speedup(self.scope)
        failures.extend(_speedup_failure(f"scope '{self.scope}'", report, self.min_speedup, own, "it ignored"))
        return failures

    def _segments_failure(self, actual: int, sites: str, splits: Sequence[str] = ()) -> str:
        broken = f"; it was broken by {sites}" if sites else ""
        split = f"; it was split by {'; '.join(splits)}" if splits else ""
        return f"scope '{self.scope}' formed {actual} SuperKernel segment(s), expected segments={self.segments}{broken}{split}."


def _speedup_failure(
    subject: str, report: CaseReport, minimum: float | None, own: float | None = None, without: str = ""
) -> list[Failure]:
    """The min_speedup check the markers share, with both modeled times. ``own`` is the factor's own
    speedup (the VARIANT with only it taken away, ``without`` says how, over the VARIANT): a scope's or the
    streams'; None judges the whole VARIANT against the BASELINE (also when the report has no
    contributions, as a training step). When the factor is the case's only one, the two are the same
    figure and the failure gives the BASELINE's and the VARIANT's times."""
    speedup = report.speedup if own is None else own
    if minimum is None or speedup >= minimum:
        return []
    if own is None or len(report.contributions) == 1:  # the only factor: its own effect is the whole
        times = f"baseline {report.baseline.time_us:.2f} us, variant {report.variant.time_us:.2f} us"
    else:
        other = report.variant.time_us * own
        times = (f"its own effect: the VARIANT with {without} {other:.2f} us, variant {report.variant.time_us:.2f} us; "
                 f"whole VARIANT {report.speedup:.4f}x, gain by {report.contributions_text()}")
    return [Failure(Verdict.SPEEDUP, f"{subject}: modeled speedup {speedup:.4f}x on {report.target} is below min_speedup={minimum}x ({times}).")]


def _check_arguments(marker: str, kwargs: Mapping[str, Any], known: Sequence[str]) -> None:
    """An unknown marker argument is a usage error that suggests the nearest known one."""
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        near = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        raise MarkerError(f"{marker} marker: unknown argument '{unknown[0]}'.{hint} It takes {', '.join(known)}.")


def _number(name: str, value: Any, kind: type, minimum: float, marker: str = "superkernel") -> Any:
    """A finite number (nan compares false with everything, so a nan minimum would never fail)."""
    number = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if not number or not math.isfinite(value) or value < minimum:
        what = "a finite number" if kind is float else "an integer"
        raise MarkerError(f"{marker} marker: {name}={value!r} must be {what} >= {minimum}.")
    return kind(value)


# Outcomes in which the scope forms no SuperKernel segment; "fused" and "hang" form at least one.
_NO_SEGMENTS = ("unfused", "bypassed", "aborted", "unsupported")


def _check_consistent(scope: str, outcome: str, segments: int | None) -> None:
    """An expectation no run could meet is a usage error, not a test that can only fail."""
    if segments is None:
        return
    if outcome in _NO_SEGMENTS and segments != 0:
        raise MarkerError(
            f"superkernel marker for scope '{scope}': outcome='{outcome}' forms no SuperKernel, so segments={segments} "
            "can never hold; drop segments= or use segments=0."
        )
    if outcome not in _NO_SEGMENTS and segments == 0:
        raise MarkerError(
            f"superkernel marker for scope '{scope}': outcome='{outcome}' forms at least one segment, so segments=0 "
            "can never hold; expect outcome='unfused' or segments >= 1."
        )


def _op_types(value: Any) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) and "::" in i for i in items):
        raise MarkerError(
            f"superkernel marker: breaks={value!r} must be a list of op types written 'namespace::name', "
            "e.g. breaks=['aten::add'].", argument="breaks"
        )
    return tuple(items)


def parse_superkernel(args: Sequence[Any], kwargs: Mapping[str, Any]) -> SuperKernelExpectation:
    """Build an expectation from marker arguments, rejecting anything it cannot honour."""
    if len(args) > 1:
        raise MarkerError(f"superkernel marker takes one positional argument (the scope), got {len(args)}: {args!r}.")
    _check_arguments("superkernel", kwargs, _SUPERKERNEL_KWARGS)
    scope = args[0] if args else kwargs.get("scope")
    if not isinstance(scope, str) or not scope:
        raise MarkerError(f"superkernel marker needs scope='<name>' as in super_kernel('<name>'), got {scope!r}.")
    outcome = kwargs.get("outcome", "fused")
    if outcome not in OUTCOMES:
        raise MarkerError(
            f"superkernel marker: outcome={outcome!r} is not one of {', '.join(OUTCOMES)}.",
            argument="outcome",
        )
    options = kwargs.get("options")
    if options is not None and not isinstance(options, str):
        raise MarkerError(
            f"superkernel marker: options={options!r} must be a string like 'feed-sync-all=1'.",
            argument="options",
        )
    min_speedup = kwargs.get("min_speedup")
    segments = None if kwargs.get("segments") is None else _number("segments", kwargs["segments"], int, 0)
    _check_consistent(scope, outcome, segments)
    breaks = kwargs.get("breaks")
    return SuperKernelExpectation(
        scope=scope,
        min_speedup=None if min_speedup is None else _number("min_speedup", min_speedup, float, 0),
        segments=segments,
        outcome=outcome,
        breaks=None if breaks is None else _op_types(breaks),
        options=options,
        missing_ops=_missing_ops("superkernel", kwargs.get("missing_ops")),
    )


def _missing_ops(marker: str, value: Any) -> str | None:
    """A marker's ``missing_ops=`` (what a check does about an op without a CPU kernel), checked."""
    if value is not None and value not in set(MissingOps):
        choices = ", ".join(repr(each.value) for each in MissingOps)
        raise MarkerError(f"{marker} marker: missing_ops={value!r} is not one of {choices}.")
    return value


def markers_missing_ops(superkernels: Sequence[SuperKernelExpectation], streams: MultiStreamExpectation) -> str | None:
    """The ``missing_ops=`` a test's markers agree on (None when none gives one); two that differ are an error."""
    given = {each.missing_ops for each in (*superkernels, streams) if each.missing_ops is not None}
    if len(given) > 1:
        raise MarkerError(
            f"the test's markers give different missing_ops= ({', '.join(map(repr, sorted(given)))}); a check has one "
            "policy: give it on one marker, or the same on all."
        )
    return next(iter(given), None)


def parse_superkernels(markers: Sequence[tuple[Sequence[Any], Mapping[str, Any]]]) -> list[SuperKernelExpectation]:
    """Every superkernel marker of a test; two markers about one scope would contradict or repeat each
    other, so they are an error naming the scope."""
    expectations = [parse_superkernel(args, kwargs) for args, kwargs in markers]
    seen: set[str] = set()
    for expectation in expectations:
        if expectation.scope in seen:
            raise MarkerError(
                f"two superkernel markers for scope '{expectation.scope}'; merge them into one marker "
                "(stack markers only for different scopes)."
            )
        seen.add(expectation.scope)
    return expectations


def parse_npu_target(args: Sequence[Any], known: Iterable[str]) -> tuple[str, ...]:
    """The targets of ``@pytest.mark.npu_target(...)``; a name that is no target (``"A3"``, a typo)
    would skip the test everywhere without a word, so it is an error with the nearest name."""
    if not args or not all(isinstance(arg, str) and arg for arg in args):
        raise MarkerError(f"npu_target marker needs target names, e.g. @pytest.mark.npu_target('a3'); got {tuple(args)!r}.")
    names = sorted(set(known))
    for arg in args:
        if arg not in names:
            near = [name for name in names if name.lower() == arg.lower()] or difflib.get_close_matches(arg, names, n=1)
            hint = f"; did you mean '{near[0]}'? (target names are case-sensitive)" if near else ""
            raise MarkerError(f"npu_target marker: '{arg}' is not a known target ({', '.join(names)}){hint}.")
    return tuple(args)


_MULTISTREAM_KWARGS = ("streams", "min_speedup", "race_free", "missing_ops")


@dataclass(frozen=True)
class MultiStreamExpectation:
    """``@pytest.mark.multistream(*, streams, min_speedup, race_free=True, missing_ops)``.

    ``race_free=False`` states that the case is known to be unsafe: the sanitizer must then find a race,
    a lifetime hazard or a deadlock, and the corrupted outputs that follow are expected.
    """

    streams: int | None = None
    min_speedup: float | None = None
    race_free: bool = True
    missing_ops: str | None = None

    def expects_hazard(self, report: CaseReport) -> bool:
        return not self.race_free and bool(report.races or report.deadlock)

    def failures(self, report: CaseReport) -> list[Failure]:
        failures: list[Failure] = []
        used = ", ".join(f"'{s}'" for s in report.streams)
        if self.streams is not None and len(report.streams) != self.streams:
            failures.append(Failure(
                Verdict.STREAMS,
                f"multistream: the VARIANT ran on {len(report.streams)} stream(s) ({used}), expected streams={self.streams}.",
            ))
        if self.race_free and report.races:
            failures.extend(
                Failure(Verdict.LIFETIME if race.kind == RaceKind.LIFETIME else Verdict.RACE, race.describe())
                for race in report.races
            )
        if not self.race_free and not (report.races or report.deadlock):
            failures.append(Failure(
                Verdict.STREAMS,
                "multistream: race_free=False expects the sanitizer to find a race, a lifetime hazard or a deadlock, "
                "but every cross-stream access is ordered.",
            ))
        own = report.streams_speedup()
        subject = f"multistream with streams {used}"
        slow = _speedup_failure(subject, report, self.min_speedup, own, "the side streams merged onto the main stream")
        if slow and (contention := report.contention) is not None:
            slow = [Failure(slow[0].verdict, f"{slow[0].text} It cannot be met: {contention.describe()}.")]
        failures.extend(slow)
        return failures


def parse_multistream(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MultiStreamExpectation:
    """Build the multi-stream expectation from marker arguments, rejecting anything it cannot honour."""
    if args:
        raise MarkerError(f"multistream marker takes keyword arguments only ({', '.join(_MULTISTREAM_KWARGS)}), got {args!r}.")
    _check_arguments("multistream", kwargs, _MULTISTREAM_KWARGS)
    race_free = kwargs.get("race_free", True)
    if not isinstance(race_free, bool):
        raise MarkerError(f"multistream marker: race_free={race_free!r} must be True or False.", argument="race_free")
    streams, min_speedup = kwargs.get("streams"), kwargs.get("min_speedup")
    return MultiStreamExpectation(
        streams=None if streams is None else _number("streams", streams, int, 1, "multistream"),
        min_speedup=None if min_speedup is None else _number("min_speedup", min_speedup, float, 0, "multistream"),
        race_free=race_free,
        missing_ops=_missing_ops("multistream", kwargs.get("missing_ops")),
    )


@dataclass(frozen=True)
class WholeExpectation:
    """``@pytest.mark.npufuse(*, min_speedup)``: the whole VARIANT (every scope and stream together) at
    least ``min_speedup`` times faster than the BASELINE; the ``superkernel`` and ``multistream`` markers'
    ``min_speedup`` judge their own factor's effect instead."""

    min_speedup: float | None = None

    def failures(self, report: CaseReport) -> list[Failure]:
        return _speedup_failure("the whole VARIANT", report, self.min_speedup)


def parse_whole(args: Sequence[Any], kwargs: Mapping[str, Any]) -> WholeExpectation:
    """Build the whole-VARIANT expectation from marker arguments, rejecting anything it cannot honour."""
    if args:
        raise MarkerError(f"npufuse marker takes keyword arguments only (min_speedup), got {args!r}.")
    _check_arguments("npufuse", kwargs, ("min_speedup",))
    minimum = kwargs.get("min_speedup")
    return WholeExpectation(None if minimum is None else _number("min_speedup", minimum, float, 0, "npufuse"))


@dataclass(frozen=True)
class AffinityExpectation:
    """``@pytest.mark.npu_affinity(max_findings=0)``: at most this many slow-form sites
    (docs/feature-docs.md#affinity-ops) in the model's graph whose rewrite saves modeled time on the target (a test that
    reintroduces a known-slow pattern fails, naming it and its rewrite). A form that costs nothing here, such as an
    ``nn.Linear`` whose input the Cube reads as ND, is still reported but does not count."""

    max_findings: int = 0

    def failures(self, report: CaseReport) -> list[Failure]:
        slow = [finding for finding in report.findings if finding.gain_us > 0]
        if len(slow) <= self.max_findings:
            return []
        listed = "; ".join(finding.describe() for finding in slow)
        return [Failure(
            Verdict.SLOW_FORM,
            f"npu_affinity: {len(slow)} known-slow op form(s) (Ascend's affinity-op guide), at most "
            f"max_findings={self.max_findings} allowed: {listed}.",
        )]


def parse_affinity(args: Sequence[Any], kwargs: Mapping[str, Any]) -> AffinityExpectation:
    """Build the affinity expectation from marker arguments, rejecting anything it cannot honour."""
    if args:
        raise MarkerError(f"npu_affinity marker takes keyword arguments only (max_findings), got {args!r}.")
    _check_arguments("npu_affinity", kwargs, ("max_findings",))
    return AffinityExpectation(_number("max_findings", kwargs.get("max_findings", 0), int, 0, "npu_affinity"))


def run_failures(
    report: CaseReport,
    expectations: Sequence[SuperKernelExpectation],
    multistream: MultiStreamExpectation | None = None,
) -> list[Failure]:
    """A VARIANT that cannot finish (compile abort, modeled hang or deadlock) fails the test unless a
    marker speaks about its cause (a superkernel marker on that scope, whose outcome then decides, or
    ``multistream(race_free=False)`` for a deadlock): on hardware it would be a crash or a timeout."""
    failure = report.variant.failure
    if failure is None or (report.deadlock and multistream is not None and multistream.expects_hazard(report)):
        return []
    failing = {name for name, scope in report.superkernels.items() if scope.outcome in ("aborted", "hang")}
    if failing & {e.scope for e in expectations}:
        return []
    log = f" (plog: {report.plog_path})" if report.plog_path else ""
    hangs = report.deadlock or any(scope.outcome == ScopeOutcome.HANG for scope in report.superkernels.values())
    return [Failure(Verdict.HANG if hangs else Verdict.ABORT, f"the VARIANT cannot run on {report.target}: {failure}{log}")]


def precision_failures(report: CaseReport, multistream: MultiStreamExpectation | None = None) -> list[Failure]:
    """Outputs that differ bit for bit between BASELINE and VARIANT: a failure, unless the case is
    declared unsafe (``race_free=False``) and the sanitizer found the hazard that explains them."""
    if report.bit_exact or (multistream is not None and multistream.expects_hazard(report)):
        return []
    lines = [m.describe() for m in report.mismatches]
    cause = " (the race(s) above corrupt them)" if report.races else ""
    return [Failure(
        Verdict.PRECISION,
        f"{len(report.mismatches)} of {len(report.outputs)} output(s) are not bit-identical between "
        f"BASELINE and VARIANT{cause}:\n  " + "\n  ".join(lines),
    )]
