"""What a report's numbers rest on: which layers were computed, and the stand-in values of the rest.

A model with real weights is computed in full. A timing-only model (weights on the meta device) is
priced from its shapes alone; its numerics are *not computed*, or *sampled*: a few layers computed with
seeded weights at their real sizes. Whatever was not computed still has to be priced, and a few ops'
costs depend on values: those take documented stand-ins (:func:`stand_ins`), stated in the report so
that nobody mistakes a stand-in for a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..ir.program import Program
from ..vocabulary import NumericsStatus

ROUTING_COSTS = frozenset({"grouped_matmul", "mc2_dispatch", "mc2_combine"})
"""Cost rules whose work depends on how tokens are routed to experts."""


@dataclass(frozen=True)
class Uncompared:
    """An output a check did not compare: it is computed from ``ops``, which were timed but could not be
    computed (``missing_ops="timing-only"``), for ``reason``."""

    output: str
    ops: tuple[str, ...]
    reason: str

    def describe(self) -> str:
        return f"{self.output} from {', '.join(self.ops)}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "ops": list(self.ops), "reason": self.reason}


@dataclass(frozen=True)
class Numerics:
    """``status``: computed, sampled, not computed or partial; ``layers``: the module paths computed when
    sampled; ``weights``: whose weights the computed layers ran on (``model`` or ``seeded``); ``stand_ins``:
    one sentence per stand-in value the timing used; ``not_compared``: when partial, each output left
    uncompared (:class:`Uncompared`)."""

    status: NumericsStatus = NumericsStatus.COMPUTED
    layers: tuple[str, ...] = ()
    weights: str = "model"
    stand_ins: tuple[str, ...] = ()
    not_compared: tuple[Uncompared, ...] = ()

    @property
    def computed(self) -> bool:
        """Whether any output was computed (and compared bit for bit)."""
        return self.status is not NumericsStatus.NOT_COMPUTED

    def describe(self) -> str:
        """One line for the summary: ``numerics sampled on layers.0, layers.60 (seeded weights)``."""
        if self.status is NumericsStatus.SAMPLED:
            return f"numerics sampled on {', '.join(self.layers)} ({self.weights} weights)"
        if self.status is NumericsStatus.NOT_COMPUTED:
            return "numerics not computed (timing only)"
        if self.status is NumericsStatus.PARTIAL:
            return f"numerics partial: {len(self.not_compared)} output(s) not compared"
        return "numerics computed"

    def lines(self) -> list[str]:
        return [
            self.describe(), *(f"  not compared: {each.describe()}" for each in self.not_compared),
            *(f"  stand-in: {text}" for text in self.stand_ins),
        ]

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status.value, "layers": list(self.layers), "weights": self.weights,
                "stand_ins": list(self.stand_ins), "not_compared": [each.to_json() for each in self.not_compared]}


def stand_ins(program: Program, routing: str = "uniform") -> tuple[str, ...]:
    """The stand-ins a timing of ``program`` without its values uses: a value-dependent op (``.item()``,
    ``nonzero``) prices the sizes it decides at their upper bound, and MoE kernels price their rows and
    the experts they read under ``routing`` (the rank model's description of it)."""
    sites: dict[tuple[str, str], int] = {}
    routed = 0
    for kernel in program.kernels:
        if kernel.info.value_dependent:
            key = (kernel.op_type, kernel.source)
            sites[key] = sites.get(key, 0) + 1
        routed += kernel.info.cost in ROUTING_COSTS
    lines = [
        f"{op_type} at {source or 'the model'}{f' (x{count})' if count > 1 else ''}: no value; "
        "sizes it decides are priced at their upper bound"
        for (op_type, source), count in sites.items()
    ]
    if routed:
        lines.append(f"routing: {routing} ({routed} MoE kernel(s) priced by the rows and experts it gives)")
    return tuple(lines)


PARTIAL_VERDICT = "partial"
"""The verdict shown for a passed test whose numerics are partial (some outputs not compared): never a
plain pass."""


def _partial(numerics: Mapping[str, Any] | None) -> bool:
    return (numerics or {}).get("status") == NumericsStatus.PARTIAL.value


def shown_verdict(verdict: str, numerics: Mapping[str, Any] | None) -> str:
    """A test's verdict as the terminal table and the HTML report show it, from its outcome and a check's
    ``numerics`` (as :meth:`Numerics.to_json` wrote it)."""
    return PARTIAL_VERDICT if verdict == "passed" and _partial(numerics) else verdict


def not_compared_lines(numerics: Mapping[str, Any] | None) -> list[str]:
    """Each output a check left uncompared, one line each, from its ``numerics`` as JSON."""
    return [
        Uncompared(each["output"], tuple(each["ops"]), each["reason"]).describe()
        for each in (numerics or {}).get("not_compared", ())
    ]


def precision_word(bit_exact: bool, numerics: Mapping[str, Any] | None) -> str:
    """A check's precision in a word or two: bit-exact or differs, marked partial when some outputs were
    not compared."""
    exact = "bit-exact" if bit_exact else "differs"
    return f"{exact} (partial)" if _partial(numerics) else exact
