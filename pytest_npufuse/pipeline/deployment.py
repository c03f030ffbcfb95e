"""The deployment a check models beyond one die: N ranks of an EP/TP/DP instance from one capture.

``compare(..., ranks=N)`` prices collectives over N ranks (the ring of an all-reduce has N dies) and models
the step of every rank (:mod:`~pytest_npufuse.simulate.ranks`): the same program, each rank's MoE layers
priced by the rows its experts receive under the check's routing, the ranks joined at every collective.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from ..errors import ArgumentError
from ..ir.program import Program
from ..plan.superkernel import plan_variant
from ..plan.tasks import Plan, Variant
from ..simulate.ranks import RanksReport, simulate_ranks
from ..simulate.routing import Routing
from ..target.profile import HardwareProfile

if TYPE_CHECKING:
    from .graph import Settings

MAX_RANKS = 4096


def check_ranks(ranks: object) -> None:
    """Refuse a ``ranks=`` that is not a rank count of a deployment."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise ArgumentError(
            f"ranks={ranks!r} is not a rank count; give the number of ranks of the deployment, 1 to {MAX_RANKS} "
            "(e.g. ranks=16 for one rank of EP 16 and its 15 peers).", argument="ranks",
        )


def ranked(profile: HardwareProfile, ranks: int) -> HardwareProfile:
    """``profile`` with its collectives over ``ranks`` dies (a count :func:`check_ranks` let through)."""
    return replace(profile, comm_ranks=ranks)


def rank_view(
    program: Program, ranks: int, routing: Routing, settings: "Settings", options: Mapping[str, str],
) -> RanksReport:
    """Every rank's step of the VARIANT (scopes honoured) of ``program`` under ``routing``."""

    def plan_of(rank_program: Program) -> Plan:
        return plan_variant(rank_program, settings.profile, variant=Variant.VARIANT, mode=settings.mode,
                            dynamic=settings.dynamic, options=options)

    return simulate_ranks(program, ranks, routing, plan_of, settings.profile, settings.host, settings.dynamic)
