"""The advisors: which SuperKernel scopes to use (seed 004) and which ops to rewrite (seed 003).

Both read one captured program of the model and never edit the model."""

from ..report.findings import Finding
from .advice import Advice, advise
from .affinity import PATTERNS, find_affinity
from .candidates import Candidate, Layout
from .structure import Family, Role

__all__ = ["Advice", "advise", "Candidate", "Layout", "Family", "Role", "PATTERNS", "Finding", "find_affinity"]
