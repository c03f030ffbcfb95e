"""``CompilerConfig`` with the fields TorchAir users set that change what the NPU would do."""

from __future__ import annotations

from types import SimpleNamespace

from ...errors import NpufuseError

MODES = ("max-autotune", "reduce-overhead")


class CompilerConfig:
    """Compiler settings, attribute-compatible with ``torchair.CompilerConfig``.

    ``mode`` selects GE graph sink (``max-autotune``, the default, where SuperKernel applies) or captured
    graph replay (``reduce-overhead``). ``debug.graph_dump.type`` is accepted because the feature
    documents set it; it does not change the model.
    """

    def __init__(self) -> None:
        self._mode = "max-autotune"
        self.debug = SimpleNamespace(graph_dump=SimpleNamespace(type=None))

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise NpufuseError(f"CompilerConfig.mode={value!r} is not supported; use one of {', '.join(MODES)}.")
        self._mode = value

    def __repr__(self) -> str:
        return f"CompilerConfig(mode={self._mode!r})"
