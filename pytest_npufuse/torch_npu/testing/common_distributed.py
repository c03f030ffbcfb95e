"""``torch_npu.testing.common_distributed``: the single-process part of torch_npu's distributed test helpers.

The model has the NPUs of one node of its target (``torch.npu.device_count()``: an A2 server's 8, an
A3 node's 16 dies), one per process, so a test that needs more skips, saying how many it needs and how
many pytest-npufuse models (``skipIfUnsupportMultiNPU``). Tests spawn their ranks and join an ``"hccl"``
group themselves; upstream's ``MultiProcessTestCase`` helpers (``with_comms``, ``init_pg``) are not
provided. Behaviour
follows Ascend/pytorch ``torch_npu/testing/common_distributed.py`` @9e73e708ab93.
"""

from __future__ import annotations

import functools
import unittest
from collections import namedtuple
from typing import Any, Callable

import torch

from ...errors import NotModeledAttributeError

__all__ = ["TEST_SKIPS", "TestSkip", "skipIfUnsupportMultiNPU"]

TestSkip = namedtuple("TestSkip", "exit_code, message")
# torch_npu's exit codes and messages for tests a machine cannot run.
TEST_SKIPS = {
    "multi-npu": TestSkip(75, "Multi-NPU condition not satisfied"),
    **{f"multi-npu-{n}": TestSkip(75, f"Need at least {n} ASCEND devices") for n in range(1, 9)},
    "hccl": TestSkip(76, "c10d not compiled with HCCL support"),
    "known_issues": TestSkip(77, "Test skipped due to known issues"),
}


def skipIfUnsupportMultiNPU(npu_number_needed: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Skip the decorated test method unless ``npu_number_needed`` NPUs are available."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def gated(test: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # a failure in the test points at the test's line
            available = torch.npu.device_count() if torch.npu.is_available() else 0
            if available < npu_number_needed:
                raise unittest.SkipTest(
                    f"Multi-NPU {npu_number_needed} condition not satisfied: the test needs {npu_number_needed} NPUs "
                    f"and pytest-npufuse models {available}"
                )
            return fn(test, *args, **kwargs)

        return gated

    return decorate


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotModeledAttributeError(
        f"torch_npu.testing.common_distributed.{name} is not modeled: spawn one process per rank and join "
        f"dist.init_process_group(backend='hccl') in each (it has: {', '.join(__all__)}).",
        op=f"torch_npu.testing.common_distributed.{name}"
    )
