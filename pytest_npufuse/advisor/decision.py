"""The scope decision tree of docs/feature-docs.md#scope-analysis, walked on modeled numbers, and the top-down
shrinking.

The tree (scope analysis guide, "Scope 范围决策树"):

- MoE model: MoE the bottleneck? yes -> MoE only, no -> attention only; pursuing the best performance ->
  try the whole decoder layer.
- Standard Transformer: first attempt -> attention only; attention validated -> widen to the whole
  decoder layer; pursuing the best performance -> the automatic analysis (the best valid layout). The
  guide's method three (profile, then scope the bottleneck) starts from the FFN instead when the FFN
  takes more of the run than the attention and its scope pays more.
- Other models: the automatic analysis or a custom scope.

The guide's per-series suggestions (:data:`TEMPLATES`) then bound the choice: a Qwen model gets attention
only, a LLaMA model attention or the decoder layer(s), a DeepSeek-V3 model MoE or the decoder layer,
whichever of them pays best, when the tree went wider.

"Validated" is the guide's own test of a scope (compiles, no timeout, precision identical); a wider scope
is taken only when it is valid and faster than the one it widens. The guide calls a gain above 10% clear
(its Q1), so a smaller one is said to be small. Top-down (method two): try all layers; when that breaks,
hangs, aborts or loses precision, one scope per layer; then per module, dropping a module scope that
still fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .candidates import FAILED, Candidate, Evaluator, Layout
from .structure import Family, Role, Structure

CLEAR_GAIN_PCT = 10.0


@dataclass(frozen=True)
class Template:
    """The guide's scope suggestion for one model series ("不同模型的 Scope 建议"): the layouts it
    recommends, recognised by the decoder layer's class name (``LlamaDecoderLayer``, ``Qwen2DecoderLayer``,
    ``DeepseekV3DecoderLayer`` in the public model code)."""

    series: str
    hints: tuple[str, ...]
    layouts: tuple[Layout, ...]

    def describe(self) -> str:
        return f"{self.series} template: {' or '.join(layout.value for layout in self.layouts)}"


# The guide's per-series suggestions: LLaMA attention only or the whole decoder layer(s); DeepSeek-V3 MoE
# only or attention + MoE in one scope (its code wraps the decoder layer); Qwen attention only.
TEMPLATES: tuple[Template, ...] = (
    Template("LLaMA series", ("llama",), (Layout.ATTENTION, Layout.DECODER_LAYER, Layout.ALL_LAYERS)),
    Template("DeepSeek-V3 series", ("deepseek",), (Layout.MOE, Layout.DECODER_LAYER)),
    Template("Qwen series", ("qwen",), (Layout.ATTENTION,)),
)


def template_of(structure: Structure) -> Template | None:
    """The series template whose hint the decoder layer's class name holds, if any."""
    if not structure.layers:
        return None
    name = structure.layers[0].frame.type.lower()
    return next((t for t in TEMPLATES if any(hint in name for hint in t.hints)), None)


def _within_template(
    chosen: Candidate | None, template: Template, candidates: Mapping[Layout, Candidate], steps: list[str],
    reference_us: float,
) -> Candidate | None:
    """The tree's choice when the series template has it; otherwise the fastest paying layout of the
    template (the guide's suggestion for the series wins over a wider scope); the tree's choice when
    none of the template's layouts pays."""
    if chosen is None or chosen.layout in template.layouts:
        return chosen
    paying = [c for layout in template.layouts if (c := candidates.get(layout)) is not None and c.pays(reference_us)]
    if not paying:
        steps.append(f"{template.describe()}; none of them pays, keep {chosen.layout.value}")
        return chosen
    pick = min(paying, key=lambda c: c.rank_key)
    steps.append(f"{template.describe()} -> {pick.layout.value} ({pick.gain_pct(reference_us):+.1f}%) "
                 f"instead of {chosen.layout.value}")
    return pick


@dataclass(frozen=True)
class Recommendation:
    """The layout to use, why (the decision tree's steps), and its modeled gain over no scope."""

    layout: Layout
    steps: tuple[str, ...]
    gain_pct: float

    @property
    def reason(self) -> str:
        return "; ".join(self.steps)


def _bottleneck(structure: Structure, module_us: Mapping[str, float], block: Role) -> tuple[Role, str]:
    """``block`` (MoE or FFN) or attention, whichever takes more baseline time over all layers (the
    guide's method three: the profile's per-module table), with the numbers; a tie goes to ``block``."""
    totals = {
        role: sum(module_us.get(found.frame.path, 0.0) for _, found in structure.kernels_of(role))
        for role in (block, Role.ATTENTION)
    }
    role = block if totals[block] >= totals[Role.ATTENTION] else Role.ATTENTION
    name = "MoE" if block is Role.MOE else "FFN"
    return role, f"{name} {totals[block]:.1f} us vs attention {totals[Role.ATTENTION]:.1f} us of the run without scopes"


def _failure(candidate: Candidate | None, reference_us: float) -> str:
    """Why a layout the tree names cannot be taken."""
    if candidate is None:
        return "has no module to wrap"
    if not candidate.valid:
        return f"is {candidate.outcome if candidate.bit_exact else 'not bit-exact'}"
    return f"does not pay ({candidate.gain_pct(reference_us):+.1f}%)"


def _compile_growth(current: Candidate, wider: Candidate) -> str:
    """The guide's price of a wider scope, "compiles slowly": how many more sub-kernels it compiles."""
    before, after = current.compile.sub_kernels, wider.compile.sub_kernels
    if after <= before:
        return ""
    return f", compiling {after} sub-kernels instead of {before} (largest SuperKernel {wider.compile.largest})"


def _widen(current: Candidate, wider: Candidate | None, step: str, steps: list[str], reference_us: float) -> Candidate:
    """Take ``wider`` when it is valid and faster than ``current``; say which way it went."""
    if wider is None:
        return current
    if wider.valid and wider.time_us < current.time_us:
        steps.append(
            f"{step}: {wider.layout.value} is valid and faster ({wider.gain_pct(reference_us):+.1f}%)"
            f"{_compile_growth(current, wider)}"
        )
        return wider
    why = f"{wider.outcome}" if not wider.valid else f"not faster ({wider.gain_pct(reference_us):+.1f}%)"
    steps.append(f"{step}: {wider.layout.value} {why}, keep {current.layout.value}")
    return current


def recommend(
    structure: Structure, candidates: Mapping[Layout, Candidate], module_us: Mapping[str, float], reference_us: float
) -> Recommendation:
    """Walk the decision tree for ``structure``'s family over the evaluated ``candidates``."""
    steps = [f"{structure.family.value} ({len(structure.layers)} layer(s))"]
    valid = [c for c in candidates.values() if c.pays(reference_us) and c.layout is not Layout.AS_WRITTEN]
    best = min(valid, key=lambda c: c.rank_key, default=None)
    chosen: Candidate | None
    if structure.family is Family.MOE:
        role, numbers = _bottleneck(structure, module_us, Role.MOE)
        first = Layout.MOE if role is Role.MOE else Layout.ATTENTION
        steps.append(f"MoE is {'' if role is Role.MOE else 'not '}the bottleneck ({numbers}) -> {first.value} only")
        chosen = candidates.get(first)
        if chosen is not None and chosen.pays(reference_us):
            chosen = _widen(chosen, candidates.get(Layout.DECODER_LAYER), "pursuing the best performance", steps, reference_us)
        else:
            steps.append(f"{first.value} only {_failure(chosen, reference_us)}; automatic analysis instead")
            chosen = best
    elif structure.family is Family.STANDARD:
        role, numbers = _bottleneck(structure, module_us, Role.FFN)
        first = Layout.ATTENTION
        steps.append("first attempt -> attention only")
        if role is Role.FFN and (ffn := candidates.get(Layout.FFN)) is not None and ffn.pays(reference_us):
            attention = candidates.get(Layout.ATTENTION)
            if attention is None or not attention.pays(reference_us) or ffn.time_us < attention.time_us:
                first = Layout.FFN
                steps.append(f"profile: FFN is the bottleneck ({numbers}) and ffn only pays more -> ffn only")
        chosen = candidates.get(first)
        if chosen is not None and chosen.pays(reference_us):
            steps.append(f"{first.value} validated ({chosen.gain_pct(reference_us):+.1f}%)")
            chosen = _widen(chosen, candidates.get(Layout.DECODER_LAYER), "widen to the whole decoder layer", steps, reference_us)
            if best is not None:
                chosen = _widen(chosen, best, "pursuing the best performance, automatic analysis", steps, reference_us)
        else:
            steps.append(f"{first.value} only {_failure(chosen, reference_us)}; automatic analysis instead")
            chosen = best
    else:
        steps.append("automatic analysis: the fastest valid layout")
        chosen = best
    template = template_of(structure)
    if template is not None:
        chosen = _within_template(chosen, template, candidates, steps, reference_us)
    if chosen is None or not chosen.pays(reference_us):
        steps.append("no layout is valid and faster than none: keep SuperKernel off")
        return Recommendation(Layout.NONE, tuple(steps), 0.0)
    gain = chosen.gain_pct(reference_us)
    if gain < CLEAR_GAIN_PCT:
        steps.append(f"modeled gain {gain:.1f}% is below the guide's {CLEAR_GAIN_PCT:.0f}% bar for a clear improvement")
    return Recommendation(chosen.layout, tuple(steps), gain)


def top_down(
    evaluator: Evaluator, layouts: Mapping[Layout, Mapping[str, str]], candidates: Mapping[Layout, Candidate]
) -> tuple[str, Candidate | None]:
    """Method two of docs/feature-docs.md#scope-analysis: the widest of all layers, per layer, per module whose scopes
    all work; at the module level a scope that still fails is dropped (a new candidate, ``top-down``). Returns
    the path taken and that candidate, or the layout it stopped at (then no new candidate)."""
    order: Sequence[Layout] = (
        Layout.WHOLE_FORWARD, Layout.ALL_LAYERS, Layout.PER_LAYER, Layout.DECODER_LAYER, Layout.MODULES, Layout.PER_MODULE,
    )
    tried = []
    for layout in order:
        candidate = candidates.get(layout)
        if candidate is None:
            continue
        if candidate.outcome not in FAILED and candidate.bit_exact:
            return " -> ".join(tried + [f"{layout.value} works"]), None
        tried.append(f"{layout.value} {candidate.outcome if candidate.bit_exact else 'loses precision'}")
    modules = next((layout for layout in (Layout.MODULES, Layout.PER_MODULE) if layout in candidates), None)
    if modules is None:
        return " -> ".join(tried or ["no layers found"]), None
    failed = set(candidates[modules].failed_scopes)
    kept = {name: label for name, label in layouts[modules].items() if label not in failed}
    if not kept:
        return " -> ".join(tried + ["every module scope fails: no scope"]), None
    note = " -> ".join(tried + [f"modules without {', '.join(sorted(failed))}"])
    return note, evaluator.evaluate(Layout.TOP_DOWN, kept, note)
