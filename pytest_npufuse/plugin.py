"""The pytest plugin's hook entry points (entry point ``pytest11: npufuse = pytest_npufuse.plugin``).

Everything that models the NPU lives in the library (:mod:`pytest_npufuse.pipeline.chain`); the pytest side
lives in :mod:`pytest_npufuse.pytest`, one module per job. This module only ties them to pytest's hooks.
"""

from __future__ import annotations

import pytest

from .frontend.tagged_events import EVENTS
from .pytest import benchmark, markers, options, settings, shim, targets, torch_trace
from .pytest.failure import or_fail
from .pytest.fixture import npu_target, npufuse  # noqa: F401 - pytest finds fixtures on the plugin module
from .pytest.recorder import RunRecorder


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    run = settings.configure(config)
    shim.configure(config)
    config.pluginmanager.register(RunRecorder(config, run.json_path, run.html_path), RunRecorder.NAME)


def pytest_sessionstart(session: pytest.Session) -> None:
    """pytest's logging plugin exists by now (it registers as the last configure step)."""
    torch_trace.filter_pytest_handlers(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    shim.unconfigure(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    profiles = settings.settings_of(config).profiles
    targets_line = "npufuse: " + ", ".join(f"{name} = {p.product} (profile {p.digest})" for name, p in profiles.items())
    return [targets_line, shim.header()]


def pytest_itemcollected(item: pytest.Item) -> None:
    benchmark.install_clock(item)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    targets.parametrize(metafunc)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Parse the markers before the test runs and skip, visibly, what the target cannot run.

    Tagged events are registered per process in TorchAir; each test starts with none, so a model built
    in several (parametrized, repeated, or xdist-reused) tests does not collide with itself.
    """
    EVENTS.reset()
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
