"""What one check compares: the model, its inputs and every choice about how it is checked.

    spec = CaseSpec(model, (x, w), numerics="sample", ranks=16)
    report = compare(spec, target="a3")

A :class:`CaseSpec` is checked once, when it is built: a choice off its vocabulary or two choices that
cannot go together (``loss=`` with ``ranks=``, ``optimizer=`` without ``loss=``) raise an
:class:`~pytest_npufuse.errors.ArgumentError` whose ``argument`` names the one at fault, before anything
is captured. The stages then read settled values: ``numerics`` is the choice the check makes (``"all"``,
``"sample"`` or ``"none"``), ``missing_ops`` a :class:`~pytest_npufuse.vocabulary.MissingOps` (None: not
chosen, so ``npufuse.check`` applies the test's markers and ``--npufuse-missing-ops``), ``routing``
a :class:`~pytest_npufuse.simulate.routing.Routing` (or ``"computed"``, settled once the numerics saw
the experts), ``options`` a read-only mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from ..errors import ArgumentError
from ..frontend.meta import weightless
from ..simulate.host import HostConfig, host_config
from ..simulate.routing import Routing, routing_of
from ..vocabulary import MissingOps
from .deployment import check_ranks
from .graph import graph_options

if TYPE_CHECKING:
    from ..report.case import CaseReport

NUMERICS = ("all", "sample", "none")
"""What ``numerics=`` may ask for: every layer computed, a sample of layers, or timing only."""

COMPUTED = "computed"
"""``routing=`` naming the model's own gating, settled from the experts the numerics saw."""


@dataclass(frozen=True, eq=False)
class CaseSpec:
    """One check, as :func:`~pytest_npufuse.compare` and ``npufuse.check`` take it; the fields are the
    keywords of ``compare`` (see its reference). Immutable; equal only to itself and hashed by identity,
    since its model and tensors compare element by element."""

    model: Callable[..., Any]
    inputs: tuple[Any, ...] = ()
    mode: str | None = None
    reference: Callable[..., Any] | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    dynamic: bool = False
    host: HostConfig | None = None
    trace_dir: str | Path | None = None
    case: str = "case"
    affinity: bool = False
    numerics: str | None = None
    routing: str | Sequence[float] | Routing | None = None
    ranks: int | None = None
    loss: Callable[[Any], Any] | None = None
    optimizer: torch.optim.Optimizer | None = None
    missing_ops: str | MissingOps | None = None
    """``"error"`` or ``"timing-only"``; None leaves the choice to the default (or to the test's markers)."""

    def __post_init__(self) -> None:
        """Check every choice and settle it, in the order the stages would meet them."""
        settle = object.__setattr__  # a frozen dataclass settles its own fields once, here
        settle(self, "inputs", tuple(self.inputs))
        settle(self, "options", MappingProxyType(dict(self.options or {})))
        settle(self, "missing_ops", _missing_ops(self.missing_ops))
        if self.ranks is not None:
            check_ranks(self.ranks)
        settle(self, "mode", graph_options(self.mode).mode)
        settle(self, "host", host_config(self.host))
        settle(self, "trace_dir", Path(self.trace_dir) if self.trace_dir is not None else None)
        if self.loss is not None:
            _check_step(self)
            settle(self, "numerics", "all")
            return
        if self.optimizer is not None:
            raise ArgumentError(
                "optimizer= needs loss=: a training step runs backward from the loss before the optimizer steps; "
                "pass loss=lambda outputs: <the scalar loss>.", argument="optimizer",
            )
        settle(self, "numerics", _numerics(self.numerics, self.model, self.inputs, self.reference))
        if self.routing is not None and self.routing != COMPUTED:
            settle(self, "routing", routing_of(self.routing))  # refused before capture; an iterator is read once

    @property
    def training(self) -> bool:
        """Whether the check is a training step (``loss=``)."""
        return self.loss is not None

    def check_scopes(self, report: CaseReport) -> None:
        """Each scope ``options`` names is one the model defines (the VARIANT's scopes in ``report``): an
        option for a scope the model lacks would change nothing, and a misspelt name would pass unseen."""
        unknown = next((scope for scope in self.options if scope not in report.superkernels), None)
        if unknown is not None:
            raise ArgumentError(
                f"options= names a scope the model does not define: {report.scope_not_found(unknown)}; check the scope name in the model and in "
                "options= (or the superkernel marker's scope=), or drop the entry.",
                argument="options", entry=f"options[{unknown!r}]",
            )

    @property
    def missing_policy(self) -> MissingOps:
        """What the check does about an op without a CPU kernel: as chosen, else stop (``error``)."""
        return MissingOps(self.missing_ops) if self.missing_ops is not None else MissingOps.ERROR


def spec_of(model: Callable[..., Any] | CaseSpec, inputs: Sequence[Any], choices: Mapping[str, Any]) -> CaseSpec:
    """The spec a ``compare``/``check`` call names: the one it was given alone, or one built from the model,
    the inputs and the keywords."""
    if not isinstance(model, CaseSpec):
        return CaseSpec(model, tuple(inputs), **choices)
    if inputs or choices:
        raise ArgumentError(
            "a CaseSpec carries the model, the inputs and every choice of the check; pass it alone (beside "
            "compare's target= and catalog=), or change a field with dataclasses.replace(spec, ...).",
            argument="spec",
        )
    return model


def _missing_ops(missing_ops: str | MissingOps | None) -> MissingOps | None:
    """The check's policy for ops without a CPU kernel, if one is chosen; a value off the vocabulary is refused."""
    if missing_ops is None:
        return None
    if missing_ops not in set(MissingOps):
        choices = ", ".join(repr(each.value) for each in MissingOps)
        raise ArgumentError(f"missing_ops={missing_ops!r} is not a choice; use one of {choices}.",
                            argument="missing_ops")
    return MissingOps(missing_ops)


def _check_step(spec: CaseSpec) -> None:
    """A training step (``loss=``) is modeled on one rank and computes every value it compares."""
    if spec.routing is not None or spec.ranks is not None:
        raise ArgumentError(
            "routing= and ranks= model a decode deployment's MoE ranks; a training step (loss=) is modeled on "
            "one rank. Drop routing=/ranks=, or check the forward without loss=.",
            argument="routing" if spec.routing is not None else "ranks",
        )
    if spec.missing_ops is MissingOps.TIMING_ONLY:
        raise ArgumentError(
            "missing_ops='timing-only' with loss=: a training step compares every gradient, and an op without a "
            "CPU kernel has none; register its CPU kernel (torch.library.impl), or check the forward without loss=.",
            argument="missing_ops",
        )
    if spec.numerics not in (None, "all"):
        raise ArgumentError(
            f"numerics={spec.numerics!r} with loss=: a training step computes every value it compares (the loss, "
            "each gradient, each updated parameter); drop numerics= or pass numerics='all'.",
            argument="numerics",
        )


def _numerics(numerics: str | None, model: Callable[..., Any], inputs: Sequence[Any], reference: Any) -> str:
    """The numerics a check computes: as asked, else all of them unless the model has no weights."""
    if numerics is not None and numerics not in NUMERICS:
        raise ArgumentError(f"numerics={numerics!r} is not a choice; use one of {', '.join(map(repr, NUMERICS))}.",
                            argument="numerics")
    empty = weightless(model, inputs)
    if numerics == "all" and empty:
        raise ArgumentError(
            "numerics='all' needs weights, but the model's parameters or inputs are on the meta device; use "
            "numerics='sample' (a few layers computed with seeded weights) or 'none' (timing only).",
            argument="numerics",
        )
    if numerics == "sample" and reference is not None:
        raise ArgumentError(
            "numerics='sample' compares the model's layers with their scopes ignored and honoured; it takes no "
            "reference= model. Drop reference=, or compute every layer (numerics='all').",
            argument="reference",
        )
    return numerics or ("none" if empty else "all")
