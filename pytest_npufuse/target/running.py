"""The target a test runner says the code under test runs on.

``torch.npu.get_device_name()``, torch_npu's SoC queries and a compiled function without a named target
answer for "the running script's target": the one ``python -m pytest_npufuse run --npu-target=...`` was
given, or, under pytest, the test's ``--npu-target``. The pytest plugin states its target here (torch-free,
so stating it costs a run that never imports torch nothing); :func:`pytest_npufuse.pipeline.backend.current_profile`
reads it first.
"""

from __future__ import annotations

from .profile import HardwareProfile

_STATED: list[HardwareProfile | None] = [None]


def state_running_target(profile: HardwareProfile | None) -> None:
    """The target code runs on from now on (None: no runner says; ``run``'s target or the default applies)."""
    _STATED[0] = profile


def stated_running_target() -> HardwareProfile | None:
    return _STATED[0]
