"""The run modes: TorchAir's three graph modes and the op-by-op ``eager`` reference.

- ``max-autotune``: GE graph mode; the graph is sunk to the device (SuperKernel via
  ``torchair.scope.super_kernel``, streams via ``npu_stream_switch``, GE inserts data events).
- ``reduce-overhead``: aclgraph capture and replay (deprecated by TorchAir in favour of npugraph_ex);
  TorchAir ignores SuperKernel scopes there.
- ``npugraph_ex``: TorchAir's aclgraph backend of today (``torch.compile(backend="npugraph_ex")``);
  native ``torch.npu`` streams and events, SuperKernel via ``torch.npu.super_kernel_scope_begin/end``.
- ``eager``: torch_npu's single-op execution, the reference a graph mode is compared against.
"""

from __future__ import annotations

import enum


class Mode(str, enum.Enum):
    """A run mode; its value is the name users write and reports print."""

    MAX_AUTOTUNE = "max-autotune"
    REDUCE_OVERHEAD = "reduce-overhead"
    NPUGRAPH_EX = "npugraph_ex"
    EAGER = "eager"

    def __str__(self) -> str:
        return self.value

    @property
    def aclgraph(self) -> bool:
        """Captured into an NPU graph and replayed (streams ordered by events and TorchAir's closure)."""
        return self in (Mode.REDUCE_OVERHEAD, Mode.NPUGRAPH_EX)


# The modes a TorchAir CompilerConfig can name (eager is ours, not a config value).
CONFIG_MODES = (Mode.MAX_AUTOTUNE.value, Mode.REDUCE_OVERHEAD.value, Mode.NPUGRAPH_EX.value)
