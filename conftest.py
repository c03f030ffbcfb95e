"""Repository-level test configuration.

The plugin's own tests drive pytest runs through ``pytester``. Every test's plog output (strict
SuperKernel scope checks write CANN-style plog files) goes to a temporary directory instead of
``$HOME/ascend/log``, through the same ``ASCEND_PROCESS_LOG_PATH`` variable CANN honours.
"""

import pytest

pytest_plugins = ("pytester",)


@pytest.fixture(autouse=True)
def _plog_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_PROCESS_LOG_PATH", str(tmp_path_factory.mktemp("plog")))
