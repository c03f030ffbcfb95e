"""The modeled process under pytest: one :class:`~pytest_npufuse.session.Session` per pytest run, kept on
``config.stash`` (as pytest-xdist keeps its ``DSession``), and one per test inside it, on the item's stash.

The run's session starts a modeled process (no tagged events yet, as in a fresh process) inside the session
current at configure (a script's under ``python -m pytest_npufuse run``, the outer test's under pytester),
which is current again after unconfigure. A test's session is current from its setup to its teardown: what
the test leaves behind (tagged events, stream switches, profiles in progress, device time) goes with it, so
parametrized, repeated and xdist-reused tests each start clean, while what was made outside any test (at a
test module's import, during collection) stays for the run.

A ``--npu-target`` given to pytest (on the command line or in the ini file) is also the device the code
under test runs on: ``torch.npu.get_device_name()`` names its SoC while the run collects and while each test
runs (the test's own target when it is parametrized over several), as under ``python -m pytest_npufuse run
--npu-target=...``. Without one, pytest states nothing, so a run started by ``run`` keeps ``run``'s target.
"""

from __future__ import annotations

import pytest

from ..session import Session, current_session
from ..target.profile import DEFAULT_TARGET
from ..target.running import RUNNING_TARGET
from .settings import settings_of
from .targets import item_target

RUN_SESSION = pytest.StashKey[Session]()
_TEST_SESSION = pytest.StashKey[Session]()


def _given(config: pytest.Config) -> bool:
    """Whether pytest was told a target: on the command line, or an ini value other than the default."""
    return config.getoption("npu_target") is not None or config.getini("npu_target") != DEFAULT_TARGET


def start_run(config: pytest.Config) -> None:
    """The run's session, current from configure to unconfigure, running on the run's target when given."""
    session = Session(current_session(), process=True)
    if _given(config):
        run = settings_of(config)
        session[RUNNING_TARGET] = run.profiles[run.default_target]
    config.stash[RUN_SESSION] = session.open()


def end_run(config: pytest.Config) -> None:
    if RUN_SESSION in config.stash:
        config.stash[RUN_SESSION].close()


def start_test(item: pytest.Item) -> None:
    """The test's session, inside the run's, running on the test's target when pytest was given one."""
    session = Session(item.config.stash[RUN_SESSION])
    if _given(item.config):
        session[RUNNING_TARGET] = settings_of(item.config).profiles[item_target(item)]
    item.stash[_TEST_SESSION] = session.open()


def end_test(item: pytest.Item) -> None:
    if _TEST_SESSION in item.stash:
        item.stash[_TEST_SESSION].close()
