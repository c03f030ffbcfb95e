"""The pytest plugin's hook entry points (entry point ``pytest11: npufuse = pytest_npufuse.plugin``).

Everything that models the NPU lives in the library (:mod:`pytest_npufuse.pipeline.chain`); the pytest side
lives in :mod:`pytest_npufuse.pytest`, one module per job. This module only ties them to pytest's hooks.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest

from .pytest import benchmark, markers, options, sessions, settings, shim, targets, torch_trace
from .pytest.failure import or_fail
from .pytest.fixture import npu_target, npufuse  # noqa: F401 - pytest finds fixtures on the plugin module
from .pytest.recorder import RunRecorder

ENTRY_POINT = "npufuse"
# Warnings about how the plugin was loaded, shown once the run is configured (and so emptied). They come
# before any config (or session) exists, and are about pytest's plugin loading, not the modeled process.
_LOAD_NOTES: list[str] = []


def pytest_plugin_registered(plugin: Any, plugin_name: str, manager: pytest.PytestPluginManager) -> None:
    """Load this plugin once however it is named. pytest loads it as the ``npufuse`` entry point; a
    ``conftest.py`` listing it in ``pytest_plugins``, or ``-p pytest_npufuse.plugin``, would register the
    same module again, which pluggy refuses with a raw "Plugin already registered" ValueError."""
    me = sys.modules[__name__]
    if plugin is me and plugin_name != ENTRY_POINT:
        manager.set_blocked(ENTRY_POINT)  # loaded by -p first: the entry point must not load it again
        return
    wanted = getattr(plugin, "pytest_plugins", ()) if isinstance(plugin, ModuleType) else ()
    listed = __name__ in ([wanted] if isinstance(wanted, str) else wanted)
    if plugin is not me and listed and manager.is_registered(me):
        manager.set_blocked(__name__)
        _LOAD_NOTES.append(
            f"{getattr(plugin, '__file__', plugin_name)} lists {__name__!r} in pytest_plugins, but pytest-npufuse is "
            f"already loaded (it is the '{ENTRY_POINT}' pytest11 entry point); remove it from pytest_plugins."
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    while _LOAD_NOTES:
        config.issue_config_time_warning(pytest.PytestConfigWarning(_LOAD_NOTES.pop(0)), stacklevel=2)
    markers.register(config)
    benchmark.note_storage(config)
    run = settings.configure(config)
    sessions.start_run(config)
    shim.configure(config)
    config.pluginmanager.register(RunRecorder(config, run.json_path, run.html_path), RunRecorder.NAME)


def pytest_sessionstart(session: pytest.Session) -> None:
    """pytest's logging plugin exists by now (it registers as the last configure step)."""
    torch_trace.filter_pytest_handlers(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    shim.unconfigure(config)
    benchmark.remove_unused_storage(config)
    sessions.end_run(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    profiles = settings.settings_of(config).profiles
    targets_line = "npufuse: " + ", ".join(f"{name} = {p.product} (profile {p.digest})" for name, p in profiles.items())
    return [targets_line, shim.header()]


def pytest_itemcollected(item: pytest.Item) -> None:
    benchmark.install_clock(item)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    targets.parametrize(metafunc)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    sessions.end_test(item)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Parse the markers before the test runs and skip, visibly, what the target cannot run.

    The test runs in a session of its own (:mod:`.pytest.sessions`): tagged events are registered per process
    in TorchAir, and each test starts with none, so a model built in several (parametrized, repeated, or
    xdist-reused) tests does not collide with itself.
    """
    sessions.start_test(item)
    expectations = or_fail(lambda: markers.expectations_of(item))
    target = targets.item_target(item)
    if expectations.targets is not None and target not in expectations.targets:
        pytest.skip(f"runs only on {', '.join(expectations.targets)}; the current target is {target}")
    profile = settings.settings_of(item.config).profiles[target]
    outcome = expectations.superkernel_outcome()
    if not profile.superkernel_supported and outcome is not None:
        pytest.skip(f"SuperKernel is not supported on {profile.product} (target {target}); this test expects '{outcome}'")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """After a test body that passed: its markers must have been applied by npufuse.check()."""
    result = yield
    markers.require_check(item)
    return result
