"""``torchair.core.utils``: TorchAir's logger, which scripts import to log beside TorchAir's own lines.

TorchAir's logger is a standard :mod:`logging` logger named ``torchair`` (level from ``TNG_LOG_LEVEL``,
default ERROR); ours is the same, so ``logger.info(...)`` and ``logger.setLevel(...)`` behave alike.
"""

from __future__ import annotations

import logging
import os

_LEVELS = {"0": logging.DEBUG, "1": logging.INFO, "2": logging.WARNING, "3": logging.ERROR}

logger = logging.getLogger("torchair")
logger.setLevel(_LEVELS.get(os.environ.get("TNG_LOG_LEVEL", "3"), logging.ERROR))

__all__ = ["logger"]
