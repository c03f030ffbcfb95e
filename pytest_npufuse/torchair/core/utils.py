"""``torchair.core.utils``: TorchAir's logger, which scripts import to log beside TorchAir's own lines.

TorchAir's logger is a standard :mod:`logging` logger named ``torchair`` (DEBUG when the process starts
with ``TORCH_COMPILE_DEBUG=1``, else the level of ``TNG_LOG_LEVEL``, default ERROR); ours is the same,
so ``logger.info(...)`` and ``logger.setLevel(...)`` behave alike.
TorchAir adds a level ``EVENT`` (35, between WARNING and ERROR) for its compile and cache milestones,
logged with ``logger.event(msg)``; tests filter on it with ``assertLogs(logger, level=EVENT_LEVEL)``.
"""

from __future__ import annotations

import functools
import logging
import os

_LEVELS = {"0": logging.DEBUG, "1": logging.INFO, "2": logging.WARNING, "3": logging.ERROR}
EVENT_LEVEL = 35
logging.addLevelName(EVENT_LEVEL, "EVENT")


def with_event_level(logger: logging.Logger) -> logging.Logger:
    """``logger`` with TorchAir's ``event(msg, *args)`` method (a log record at :data:`EVENT_LEVEL`)."""
    logger.event = functools.partial(logger.log, EVENT_LEVEL)  # type: ignore[attr-defined]
    return logger


logger = with_event_level(logging.getLogger("torchair"))
# TorchAir's logger logs everything when the process starts with TORCH_COMPILE_DEBUG=1 (its debug folder).
_DEBUG = os.environ.get("TORCH_COMPILE_DEBUG") == "1"
logger.setLevel(logging.DEBUG if _DEBUG else _LEVELS.get(os.environ.get("TNG_LOG_LEVEL", "3"), logging.ERROR))

__all__ = ["logger", "EVENT_LEVEL"]
