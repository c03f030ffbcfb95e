"""The advisors: which SuperKernel scopes to use (docs/feature-docs.md#scope-analysis) and which ops to rewrite
(docs/feature-docs.md#affinity-ops).

Both read one captured program of the model and never edit the model."""

from ..report.findings import Finding
from .advice import Advice, advise
from .affinity import PATTERNS, find_affinity
from .candidates import Candidate, Layout
from .structure import Family, Role

__all__ = ["Advice", "advise", "Candidate", "Layout", "Family", "Role", "PATTERNS", "Finding", "find_affinity"]
