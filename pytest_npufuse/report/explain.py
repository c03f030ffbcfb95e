"""Explanations a failing check prints after its findings, so a user can act without opening a trace:

- each op that split a SuperKernel scope, why a SuperKernel cannot call it (its catalog entry's
  ``unfusable`` reason: a plain residual ``aten::add`` is a TBE kernel), the usual fixes, and which of
  the ops are new against the baseline file when there is one;
- where a side stream's kernels went when the timeline shows no lane for it (:mod:`.streams`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..ir.lines import code_at, file_line
from ..plan.tasks import ScopeBreak
from ..vocabulary import Unfusable
from .case import CaseReport
from .verdict import Failure

# The usual ways out, by the catalog's reason.
_FIXES = {
    Unfusable.TBE: "move the op before or after the scope, or use a fused Ascend C op that does its work (a residual add "
    "before RMSNorm: torch_npu.npu_add_rms_norm)",
    Unfusable.COPY: "avoid the copy inside the scope (a contiguous() or clone() the graph does not need, a dtype or "
    "format change); do it before the scope",
    Unfusable.AICPU: "move it out of the scope",
    Unfusable.AICPU_DTYPE: "give it a dtype its AI Core kernel takes (e.g. int32 instead of int64), or move it out of "
    "the scope",
    Unfusable.HOST: "compute it before the graph or outside the scope (an allocation, a Python scalar or a .item())",
    Unfusable.COMM: "use AllReduce, ReduceScatter, AllGather or AlltoAll, or end the scope before the collective",
    Unfusable.MC2: "end the scope before it and start another after it",
    Unfusable.ATB: "use the GE op of the same computation (e.g. npu_fused_infer_attention_score) or keep it outside",
    Unfusable.PENDING: "keep it outside the scope (the layout CANN's own recipes use) and scope the ops around it",
    Unfusable.UNVERIFIED: "keep it outside the scope; if your CANN fuses it, declare it in pyproject.toml "
    "[tool.npufuse.ops.\"{op}\"] with fusable = true",
    Unfusable.UNKNOWN: "describe it in pyproject.toml [tool.npufuse.ops.\"{op}\"] (engine, fusable, ...); if it is an "
    "Ascend C kernel, fusable = true",
}
_ACCEPT = (
    "if the split is intended, say so: @pytest.mark.superkernel('{scope}', segments={segments}, breaks={breaks}); "
    "strict-scope-check=abort in the scope options makes any split a compile error"
)


def break_key(site: ScopeBreak) -> str:
    """How a baseline file records a breaking op: its op type and the file name and line it came from
    (no directory, so shards checked out in different places record the same text)."""
    where = file_line(site.source)
    return f"{site.op_type} at {where}" if where else site.op_type


def new_breaks(sites: Sequence[ScopeBreak], known: Sequence[str]) -> list[bool]:
    """Which of ``sites`` a baseline that recorded ``known`` (see :func:`break_key`) did not have.

    An op at the same line is the same op; an op whose line moved (code added above it) is matched
    to a recorded op of the same type that is left over; what remains is new."""
    left = list(known)
    matched = [False] * len(sites)
    for index, site in enumerate(sites):
        if break_key(site) in left:
            left.remove(break_key(site))
            matched[index] = True
    for index, site in enumerate(sites):
        if not matched[index]:
            same_type = next((k for k in left if k.split(" at ", 1)[0] == site.op_type), None)
            if same_type is not None:
                left.remove(same_type)
                matched[index] = True
    return [not m for m in matched]


def break_lines(report: CaseReport, known: Mapping[str, Sequence[str]] | None) -> list[str]:
    """Per broken scope: each breaking op with why it cannot be fused, whether it is new against the
    baseline (``known``: the baseline's break keys per scope, None without a baseline entry), and the fixes."""
    lines: list[str] = []
    for scope in report.superkernels.values():
        sites = scope.break_points
        if not sites:
            continue
        fresh = new_breaks(sites, known.get(scope.scope, ())) if known is not None else [False] * len(sites)
        lines.append(f"scope '{scope.scope}' is split into {scope.segments} SuperKernel segment(s) by:")
        fixes: dict[str, list[str]] = {}
        for site, is_new in zip(sites, fresh):
            mark = " [NEW: not in the baseline]" if is_new else ""
            why = f": {site.why}" if site.why else ""
            lines.append(f"  {site.describe()}{mark}{why}")
            code = code_at(site.source)
            lines.extend([f"    {site.source.rsplit(':', 1)[-1]} | {code}"] if code else [])
            if site.unfusable in _FIXES:
                ops = fixes.setdefault(_FIXES[site.unfusable], [])
                ops.extend([site.op_type] if site.op_type not in ops else [])
        for fix, ops in fixes.items():
            lines.append(f"  fix for {', '.join(ops)}: {fix.format(op=ops[0])}")
        breaks = sorted({site.op_type for site in sites})
        lines.append("  " + _ACCEPT.format(scope=scope.scope, segments=scope.segments, breaks=breaks))
    return lines


def failure_text(
    report: CaseReport,
    failures: Sequence[Failure],
    known_breaks: Mapping[str, Sequence[str]] | None = None,
    explain_breaks: bool = False,
) -> str:
    """The message of a failed check. Its first line is the first finding, since pytest's short test
    summary shows only that line; the other findings follow, then the case's numbers, then why each
    breaking op splits its scope (when a finding is about scopes or time) and where side streams went."""
    first, *rest = failures
    lines = [f"npufuse {first.verdict}: {first.text}", *(f"- {each.verdict}: {each.text}" for each in rest)]
    lines.append(f"case: {report.summary()}")
    if explain_breaks:
        lines += break_lines(report, known_breaks)
    lines += [f"note: {note}" for note in report.stream_notes()]
    return "\n".join(lines)
