"""Keep torch's structured-trace records out of pytest's captured log.

Every ``torch.compile`` step logs an empty DEBUG record on the non-propagating logger ``torch.__trace``,
meant only for torch's own trace file (``TORCH_TRACE``, read by tlparse). pytest 9.2 attaches its log
handlers to every non-propagating logger, so a failing test would list dozens of blank
``DEBUG torch.__trace`` lines under "Captured log call", burying the failure. A filter on each of pytest's
logging handlers drops those records; torch's own trace handler keeps them, so ``TORCH_TRACE`` still
writes its file.
"""

from __future__ import annotations

import logging

import pytest

TRACE_LOGGER = "torch.__trace"
LOGGING_PLUGIN = "logging-plugin"  # the name pytest registers its logging plugin under


class NoTorchTrace(logging.Filter):
    """Passes every record but torch's structured-trace ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != TRACE_LOGGER


def filter_pytest_handlers(config: pytest.Config) -> None:
    """Add :class:`NoTorchTrace` to every handler of pytest's logging plugin (captured log, caplog, live
    log, log file); nothing to do when the plugin is disabled (``-p no:logging``)."""
    plugin = config.pluginmanager.get_plugin(LOGGING_PLUGIN)
    if plugin is None:
        return
    for handler in vars(plugin).values():
        if isinstance(handler, logging.Handler) and not any(isinstance(f, NoTorchTrace) for f in handler.filters):
            handler.addFilter(NoTorchTrace())
