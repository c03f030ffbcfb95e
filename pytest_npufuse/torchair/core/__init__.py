"""``torchair.core``: only ``torchair.core.utils`` (its logger) is used by model code."""

from . import utils

__all__ = ["utils"]
