"""``npugraph_ex.core``: only ``npugraph_ex.core.utils`` (its logger) is used by model code."""

from . import utils

__all__ = ["utils"]
