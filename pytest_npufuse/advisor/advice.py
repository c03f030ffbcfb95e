"""``advise(model, *inputs)``: rank SuperKernel scope layouts for a model and recommend one.

The model is captured once; every layout is a re-annotation of that one program (see
:mod:`.candidates`), planned and simulated on the target. The result lists each layout with its
scopes, segments, breaking ops with their source lines, outcome, bit-exactness and modeled gain over
the same run with no scope, then the recommendation of the decision tree of docs/feature-docs.md#scope-analysis with the
``with`` lines to paste at the module calls the layout wraps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..frontend.repeat import capture_program
from ..ir.program import ModuleFrame
from ..plan.compilation import compile_costs
from ..plan.options import parse_options
from ..plan.streams import stream_plan
from ..plan.superkernel import plan_variant
from ..plan.tasks import Variant
from ..report.attribution import Attribution, attribute
from ..report.findings import Finding, findings_json
from ..report.table import aligned
from ..sanitize.checker import sanitize
from ..simulate.timeline import simulate
from ..target.catalog import OpCatalog
from ..target.profile import HardwareProfile
from ..target.resolve import Target
from ..vocabulary import Mode
from .affinity import find_affinity
from .candidates import Candidate, Evaluator, Layout, assignments, top_modules, with_scopes
from .decision import Recommendation, recommend, top_down
from .structure import Layer, Role, Structure, structure_of

_TABLE_HEADER = (
    "rank", "layout", "scopes", "segments", "breaking ops", "outcome", "bit-exact", "time us", "gain", "compiles",
)


@dataclass(frozen=True)
class Advice:
    """Ranked scope layouts for one model on one target, and the one to use."""

    target: str
    structure: Structure
    reference_us: float
    candidates: tuple[Candidate, ...]
    recommendation: Recommendation
    paste: tuple[str, ...]
    top_down: str
    attribution: Attribution
    findings: tuple[Finding, ...] = ()

    def candidate(self, layout: Layout) -> Candidate | None:
        return next((c for c in self.candidates if c.layout is layout), None)

    def rows(self) -> list[tuple[str, ...]]:
        """The ranked table's cells (valid layouts by modeled time first, then the others)."""
        rows = [_TABLE_HEADER]
        for rank, c in enumerate(self.candidates, start=1):
            breaks = ", ".join(site.describe() for site in c.breaks[:3]) + (f" +{len(c.breaks) - 3}" if len(c.breaks) > 3 else "")
            time = f"{c.time_us:.1f}" if math.isfinite(c.time_us) else "-"
            gain = f"{c.gain_pct(self.reference_us):+.1f}%" if math.isfinite(c.time_us) else "-"
            rows.append((
                str(rank), c.layout.value, _labels(c.scopes), str(c.segments), breaks or "-",
                c.outcome, "yes" if c.bit_exact else "NO", time, gain, c.compile.describe(),
            ))
        return rows

    def lines(self) -> list[str]:
        """The report a person reads: header, ranked table, top-down path, recommendation, paste lines."""
        table = aligned(self.rows())
        layers = len(self.structure.layers)
        header = (
            f"npufuse advise ({self.target}): {self.structure.family.value}, {layers} layer(s), "
            f"roles {', '.join(role.value for role in self.structure.roles()) or 'none'}; "
            f"no scope {self.reference_us:.1f} us"
        )
        rec = self.recommendation
        lines = [header, *table, f"top-down: {self.top_down}"]
        for candidate in self.candidates:
            if candidate.outcome in ("error", "hang") and candidate.reason:
                lines.append(f"  {candidate.layout.value}: {candidate.reason}")
            if candidate.compile_timeout:
                lines.append(
                    f"  {candidate.layout.value}: estimated compile ~{candidate.compile.seconds:.0f} s passes the "
                    f"limit {candidate.compile_limit_s:.0f} s (estimate; the scope guide: a scope too large to compile "
                    f"in time is shrunk); not valid"
                )
        lines.append(f"recommend {rec.layout.value} (modeled gain {rec.gain_pct:+.1f}%): {rec.reason}")
        lines += self.paste
        if self.findings:
            lines.append(f"known-slow op forms (affinity ops): {len(self.findings)} finding(s)")
            lines += [f"  {finding.describe()}" for finding in self.findings]
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "family": self.structure.family.value,
            "layers": len(self.structure.layers),
            "reference_us": round(self.reference_us, 3),
            "candidates": [
                {
                    "layout": c.layout.value, "scopes": list(dict.fromkeys(c.scopes)), "segments": c.segments,
                    "breaks": [{"op_type": b.op_type, "source": b.source, "count": b.count} for b in c.breaks],
                    "outcome": c.outcome, "bit_exact": c.bit_exact,
                    "time_us": round(c.time_us, 3) if math.isfinite(c.time_us) else None,
                    "gain_pct": round(c.gain_pct(self.reference_us), 2) if math.isfinite(c.time_us) else None,
                    "reason": c.reason, "note": c.note,
                    "compile": {
                        "superkernels": c.compile.superkernels, "compiled": c.compile.compiled,
                        "sub_kernels": c.compile.sub_kernels, "largest": c.compile.largest,
                        "seconds_estimate": round(c.compile.seconds, 1), "timeout": c.compile_timeout,
                    },
                }
                for c in self.candidates
            ],
            "recommendation": {
                "layout": self.recommendation.layout.value, "reason": self.recommendation.reason,
                "gain_pct": round(self.recommendation.gain_pct, 2), "paste": list(self.paste),
            },
            "top_down": self.top_down,
            "affinity": findings_json(self.findings),
            "attribution": self.attribution.to_json(),
        }


def _labels(scopes: Sequence[str]) -> str:
    """Scope labels for the table; one per layer collapses to its first and last."""
    labels = list(dict.fromkeys(scopes))
    if len(labels) > 3:
        return f"{labels[0]}..{labels[-1]} ({len(labels)})"
    return ",".join(labels) or "-"


def _short(site: str) -> str:
    return site.rsplit("/", 1)[-1] if site else "?"


def _attribute_name(frame: ModuleFrame) -> str:
    return frame.path.rsplit(".", 1)[-1]


def _other_paste(layout: Layout, modules: Sequence[ModuleFrame], options: str) -> tuple[str, ...]:
    """The ``with`` lines of a layout for a model without decoder layers: around the forward's body, or
    around the call of each outermost module."""
    if layout is Layout.WHOLE_FORWARD:
        return ("  in the model's forward, around its whole body:", f'    with torchair.scope.super_kernel("forward", "{options}"):')
    if layout is not Layout.PER_MODULE:
        return ()
    lines: list[str] = []
    for frame in modules:
        label = frame.path.replace(".", "_")
        lines += [
            f"  at {_short(frame.call_site)}, around self.{frame.path}(...):",
            f'    with torchair.scope.super_kernel("{label}", "{options}"):',
        ]
    return tuple(lines)


def _paste_lines(layout: Layout, structure: Structure, options: str) -> tuple[str, ...]:
    """Where to put which ``with`` line for ``layout``: at the call of the module each scope wraps (its
    call site in the first layer), decode only through :func:`~pytest_npufuse.superkernel_scope`."""
    if layout is Layout.NONE or not structure.layers:
        return ()
    first: Layer = structure.layers[0]
    layer_site, layer_type = _short(first.frame.call_site), first.frame.type
    container = first.frame.path.rsplit(".", 1)[0] if "." in first.frame.path else "layers"
    opts = f'"{options}"'
    gate = "  # decode only: superkernel_scope(not is_prefill, ...) from pytest_npufuse"
    if layout is Layout.ALL_LAYERS:
        return (
            f"  at {layer_site}, around the loop over self.{container}:{gate}",
            f'    with torchair.scope.super_kernel("all_layers", {opts}):',
        )
    if layout is Layout.PER_LAYER:
        return (
            f"  at {layer_site}, in the loop over self.{container} (for i, layer in enumerate(...)):{gate}",
            f'    with torchair.scope.super_kernel(f"layer_{{i}}", {opts}):',
        )
    if layout is Layout.DECODER_LAYER:
        return (
            f"  at {layer_site}, around the call of each {layer_type}:{gate}",
            f'    with torchair.scope.super_kernel("decoder_layer", {opts}):',
        )
    roles = {Layout.ATTENTION: (Role.ATTENTION,), Layout.MOE: (Role.MOE,), Layout.FFN: (Role.FFN,)}.get(layout, structure.roles())
    lines = []
    for role in roles:
        block = next((b for layer in structure.layers if (b := layer.block(role)) is not None), None)
        if block is not None:
            lines += [
                f"  at {_short(block.frame.call_site)}, in {layer_type}.forward around self.{_attribute_name(block.frame)}(...):{gate}",
                f'    with torchair.scope.super_kernel("{role.value}", {opts}):',
            ]
    return tuple(lines)


def _rank(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    return tuple(sorted(candidates, key=lambda c: c.rank_key))


def advise(
    model: Callable[..., Any],
    *inputs: Any,
    target: str | HardwareProfile | Target | None = None,
    options: str = "",
    catalog: OpCatalog | None = None,
    compile_limit_s: float | None = None,
) -> Advice:
    """Rank SuperKernel scope layouts for ``model`` on ``target`` and recommend one; list the
    affinity-op findings (docs/feature-docs.md#affinity-ops) with their modeled gains.

    ``options`` is the SuperKernel options string every candidate scope gets (e.g.
    ``"strict-scope-check=abort"`` to see which layouts a strict check would reject). ``target`` and
    ``catalog`` are as for :func:`~pytest_npufuse.compare`. ``compile_limit_s`` is the compile time
    (estimated, :mod:`~pytest_npufuse.plan.compilation`) past which a layout is flagged and not valid; by
    default the timeout of ``plan/compile.toml``.
    """
    resolved = Target.resolve(target, catalog=catalog)
    profile, catalog = resolved.profile, resolved.catalog
    parse_options("advise", options)
    program = capture_program(model, *inputs, catalog=catalog)
    plain = with_scopes(program, {}, "")
    streams = stream_plan(plain, Mode.MAX_AUTOTUNE)
    limit = compile_costs().timeout_s if compile_limit_s is None else compile_limit_s
    evaluator = Evaluator(plain, profile, options, sanitize(plain, streams), limit)
    structure = structure_of(program)
    layouts = assignments(structure, program)
    reference = evaluator.run(Layout.NONE, plain)
    evaluated: dict[Layout, Candidate] = {layout: evaluator.evaluate(layout, assignment) for layout, assignment in layouts.items()}
    if program.superkernel_scopes():
        evaluated[Layout.AS_WRITTEN] = evaluator.run(Layout.AS_WRITTEN, program, "the scopes in the model code")
    path, shrunk = top_down(evaluator, layouts, evaluated)
    if shrunk is not None:
        evaluated[Layout.TOP_DOWN] = shrunk
    attribution = attribute(plain, simulate(plain, plan_variant(plain, profile, variant=Variant.BASELINE), profile))
    module_us: Mapping[str, float] = {row.path: row.total_us for row in attribution.modules}
    recommendation = recommend(structure, evaluated, module_us, reference.time_us)
    ranked = _rank([*evaluated.values(), reference])
    paste = (
        _paste_lines(recommendation.layout, structure, options) if structure.layers
        else _other_paste(recommendation.layout, tuple(top_modules(program)), options)
    )
    return Advice(
        profile.name, structure, reference.time_us, ranked, recommendation, paste, path, attribution,
        find_affinity(plain, profile, catalog),
    )
