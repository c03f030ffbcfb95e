"""The markers: documented once in :data:`MARKERS`, parsed once per item into :class:`ItemExpectations`.

Parsing happens at set-up, before the test body runs, so a wrong marker argument fails the test as a
usage error naming the argument; the fixture and the checks then read the typed expectations from
the item's stash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from ..gate.expectations import (
    AffinityExpectation,
    MultiStreamExpectation,
    SuperKernelExpectation,
    WholeExpectation,
    markers_missing_ops,
    parse_affinity,
    parse_multistream,
    parse_npu_target,
    parse_superkernels,
    parse_whole,
    precision_failures,
    run_failures,
)
from ..report.verdict import Failure, first_cause
from .settings import settings_of

if TYPE_CHECKING:
    from ..report.case import CaseReport

MARKERS = (
    "npufuse(*, min_speedup=None): min_speedup judges the whole VARIANT (every scope and side stream together) "
    "against the BASELINE, checked by npufuse.check().",
    "superkernel(scope, *, min_speedup=None, segments=None, outcome='fused', breaks=None, options=None, "
    "missing_ops=None): expectations about one SuperKernel scope, checked by npufuse.check(); stack markers for "
    "several scopes. min_speedup judges the scope's own effect: the VARIANT with only this scope ignored (streams kept) over the VARIANT. outcome is one of fused, unfused, bypassed, aborted, hang, unsupported; breaks lists the op "
    "types (e.g. 'aten::add') expected to split the scope; options replaces the scope's options string; "
    "missing_ops ('error' or 'timing-only') overrides --npufuse-missing-ops for the check.",
    "multistream(*, streams=None, min_speedup=None, race_free=True, missing_ops=None): expectations about in-graph "
    "multi-stream execution, checked by npufuse.check(); min_speedup judges the side streams' own effect: the VARIANT "
    "with them merged onto the main stream (scopes kept) over the VARIANT; missing_ops as for superkernel.",
    "npu_target(*names): run this test only on these NPU targets (e.g. 'a3'); it is skipped on the others.",
    "npu_affinity(*, max_findings=0): npufuse.check() also looks for the op forms Ascend's affinity-op guide names as slow (one_hot+sum, "
    "nn.Linear, bmm to [b,1,1], repeat_interleave with a scalar, gather, IndexPutV2, unfused RotaryMul / RmsNorm / "
    "ScaledMaskedSoftmax / SwiGlu / FlashAttentionScore / MatmulAllReduce) and fails when more than max_findings "
    "sites are found, naming each with its source line, rewrite and modeled gain.",
)


def register(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


@dataclass(frozen=True)
class ItemExpectations:
    """What one test's markers expect. ``multistream`` holds the marker's defaults when there is none:
    every test is checked for races, marker or not. ``targets`` is None when the test runs on any target."""

    superkernels: tuple[SuperKernelExpectation, ...]
    multistream: MultiStreamExpectation
    targets: tuple[str, ...] | None
    affinity: AffinityExpectation | None = None
    missing_ops: str | None = None
    whole: WholeExpectation = WholeExpectation()

    @property
    def scope_options(self) -> dict[str, str]:
        """Options strings the markers put in place of the model's, by scope."""
        return {e.scope: e.options for e in self.superkernels if e.options is not None}

    def superkernel_outcome(self) -> str | None:
        """The first outcome a marker expects that needs SuperKernel support on the target (every one
        but 'unsupported'), or None."""
        return next((e.outcome for e in self.superkernels if e.outcome != "unsupported"), None)

    @property
    def needs_check(self) -> bool:
        """Markers that only npufuse.check() applies: a test that never calls it would pass unchecked."""
        return bool(self.superkernels) or self.multistream != MultiStreamExpectation() or self.whole != WholeExpectation()

    def about_scopes_or_time(self, report: CaseReport) -> bool:
        """Whether a SuperKernel expectation or a min_speedup is unmet: then the failure explains the
        scope breaks (why each op cannot fuse and the fixes)."""
        streams = self.multistream.min_speedup
        own = report.streams_speedup()
        return (
            any(e.failures(report) for e in self.superkernels)
            or (streams is not None and (report.speedup if own is None else own) < streams)
            or bool(self.whole.failures(report))
        )

    def failures(self, report: CaseReport) -> list[Failure]:
        """Each unmet expectation with its verdict, causes first (see :func:`first_cause`): the run
        itself, races, scope breaks, precision, speed."""
        streams = self.multistream
        failures = run_failures(report, self.superkernels, streams) + precision_failures(report, streams)
        failures += streams.failures(report) + self.whole.failures(report)
        for expectation in self.superkernels:
            failures.extend(expectation.failures(report))
        if self.affinity is not None:
            failures.extend(self.affinity.failures(report))
        return first_cause(failures)


_EXPECTATIONS = pytest.StashKey[ItemExpectations]()


def expectations_of(item: pytest.Item) -> ItemExpectations:
    """The item's expectations, parsed on first use and kept on the item; raises MarkerError."""
    if _EXPECTATIONS not in item.stash:
        item.stash[_EXPECTATIONS] = _parse(item)
    return item.stash[_EXPECTATIONS]


def _parse(item: pytest.Item) -> ItemExpectations:
    stream_mark = item.get_closest_marker("multistream")
    target_mark = item.get_closest_marker("npu_target")
    known = settings_of(item.config).known_targets
    affinity_mark = item.get_closest_marker("npu_affinity")
    whole_mark = item.get_closest_marker("npufuse")
    superkernels = tuple(parse_superkernels([(mark.args, mark.kwargs) for mark in item.iter_markers("superkernel")]))
    multistream = parse_multistream(stream_mark.args, stream_mark.kwargs) if stream_mark else MultiStreamExpectation()
    return ItemExpectations(
        superkernels=superkernels,
        multistream=multistream,
        targets=None if target_mark is None else parse_npu_target(target_mark.args, known),
        affinity=parse_affinity(affinity_mark.args, affinity_mark.kwargs) if affinity_mark else None,
        missing_ops=markers_missing_ops(superkernels, multistream),
        whole=parse_whole(whole_mark.args, whole_mark.kwargs) if whole_mark else WholeExpectation(),
    )


_CHECKED = pytest.StashKey[bool]()


def checked(item: pytest.Item) -> None:
    """Note that the test called npufuse.check(), which applies its markers."""
    item.stash[_CHECKED] = True


def require_check(item: pytest.Item) -> None:
    """Fail a test whose superkernel or multistream markers were never applied: it passed without
    checking what it claims."""
    if _CHECKED not in item.stash and expectations_of(item).needs_check:
        pytest.fail(
            "npufuse: this test has superkernel/multistream markers but never called npufuse.check(), which "
            "applies them; call npufuse.check(model, *inputs) in the test or remove the markers.",
            pytrace=False,
        )
