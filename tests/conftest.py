"""Shared set-up for the plugin's own tests.

``pytester`` runs nested pytest sessions in this process and afterwards forgets every module first
imported during them. torch imports much of Dynamo lazily on the first compile, and re-importing it
registers its backends twice, so one small compile happens here, before any nested session. The
reference kernels are imported here for the same reason: a second import would define the ``npu``
ops again.
"""

import pytest
import torch

from pytest_npufuse import compare, install_shims, torch_npu, torchair, uninstall_shims  # noqa: F401 - torch_npu: see above
from pytest_npufuse.shim import state


class _Warm(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("warm", ""):
            return x @ x


compare(_Warm(), torch.ones(2, 2))


@pytest.fixture
def shim():
    """The shim installed for one test, and removed after it unless it was already on."""
    was_active = state().active
    installed = install_shims()
    yield installed
    if not was_active:
        uninstall_shims()


@pytest.fixture(autouse=True)
def nested_runs_are_not_xdist_workers(monkeypatch):
    """A pytest session a test starts (pytester, a subprocess) is serial even when this suite runs under
    ``-n``; left in the environment, an xdist worker's variables make pytest-benchmark in that session
    switch itself off with a warning."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
