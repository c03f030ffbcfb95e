"""``npugraph_ex.core.utils``: npugraph_ex's logger, a standard :mod:`logging` logger named
``npugraph_ex`` (DEBUG when ``TORCH_COMPILE_DEBUG=1``, else ERROR, as npugraph_ex sets it), with
TorchAir's ``EVENT`` level (see :mod:`pytest_npufuse.torchair.core.utils`)."""

from __future__ import annotations

import logging
import os

from ...torchair.core.utils import EVENT_LEVEL, with_event_level

__all__ = ["logger", "EVENT_LEVEL"]

logger = with_event_level(logging.getLogger("npugraph_ex"))
logger.setLevel(logging.DEBUG if os.environ.get("TORCH_COMPILE_DEBUG") == "1" else logging.ERROR)
