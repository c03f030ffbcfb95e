"""The target a test runner says the code under test runs on.

``torch.npu.get_device_name()``, torch_npu's SoC queries and a compiled function without a named target
answer for "the running script's target": the one ``python -m pytest_npufuse run --npu-target=...`` was
given, or, under pytest, the test's ``--npu-target``. The pytest plugin states its target in its session
(torch-free, so stating it costs a run that never imports torch nothing), and each test in its own;
:func:`pytest_npufuse.pipeline.backend.current_profile` reads it first.
"""

from __future__ import annotations

from ..session import Scope, SessionKey, current_session
from .profile import HardwareProfile

# A session inside another (a test in a pytest run, a pytest run inside a script's) runs on its parent's
# target until it states its own.
RUNNING_TARGET: SessionKey[HardwareProfile | None] = SessionKey("the running target", lambda: None, Scope.INHERITED)


def state_running_target(profile: HardwareProfile | None) -> None:
    """The target code runs on in the current session (None: no runner says; ``run``'s target or the
    default applies)."""
    current_session()[RUNNING_TARGET] = profile


def stated_running_target() -> HardwareProfile | None:
    return current_session()[RUNNING_TARGET]
