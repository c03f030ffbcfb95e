"""The ``npufuse`` and ``npu_target`` fixtures.

The plugin loads on every pytest run, with or without npufuse tests, so nothing heavy is imported
until a test asks for ``npufuse``: then :mod:`.library` (torch, the pipeline, the advisors) is loaded,
as pytest-xdist and Hypothesis load their machinery only when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .settings import settings_of

if TYPE_CHECKING:
    from .library import NpuFuse


@pytest.fixture
def npu_target(request: pytest.FixtureRequest) -> str:
    """The name of the NPU target this test runs against (see --npu-target)."""
    return getattr(request, "param", None) or settings_of(request.config).default_target


@pytest.fixture
def npufuse(request: pytest.FixtureRequest, npu_target: str) -> NpuFuse:
    """Compile, run and check models against the modeled target; see NpuFuse.check."""
    from .library import NpuFuse  # first use: loads torch and the pipeline (see the module docstring)

    return NpuFuse(request, npu_target)
