"""``torchair.scope``: the TorchAir scope context managers, captured by ``torch.compile``.

Each scope pushes a list of (key, value) attributes through the side-effecting ``npufuse::scope_enter``
op and pops it with ``npufuse::scope_exit``; the backend resolves nesting per kernel (see
:mod:`pytest_npufuse.frontend.scopes`). Names and signatures follow TorchAir so model code moves between a CPU CI
and a real NPU by changing one import.
"""

from __future__ import annotations

import warnings
from types import TracebackType

import torch

from ..errors import OpTypeError, OptionsWarning, ScopeError
from ..frontend import scopes, syncs

__all__ = ["super_kernel", "npu_stream_switch", "limit_core_num", "npu_wait_tensor", "op_never_timeout", "data_dump"]


class _Scope:
    """A ``with`` block that brackets its ops with enter/exit marker nodes in the graph."""

    def __init__(self, keys: list[str], values: list[str]) -> None:
        self._keys = keys
        self._values = values

    def __enter__(self) -> None:
        torch.ops.npufuse.scope_enter(self._keys, self._values)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        torch.ops.npufuse.scope_exit()


def super_kernel(scope: str | None, options: str = "") -> _Scope:
    """Mark the ops inside as one SuperKernel range named ``scope``.

    The same name means the same range. ``None`` turns SuperKernel off for the ops inside, even within
    an outer scope. ``options`` is ``"opt1=v1:opt2=v2"``; it is validated when the graph is planned, where
    the error can name the scope.
    """
    if scope is not None and not isinstance(scope, str):
        raise ScopeError(
            f"super_kernel(scope=...) takes a str or None, got {scope!r}; name the scope, e.g. 'sp1'.",
            op="super_kernel", argument="scope",
        )
    if scope == "":
        raise ScopeError(
            "super_kernel(scope='') is ambiguous; pass a name such as 'sp1', or None to turn fusion off.",
            op="super_kernel", argument="scope",
        )
    if not isinstance(options, str):
        raise ScopeError(
            f"super_kernel({scope!r}, options=...) takes a str like "
            f"'stream-fusion=1:feed-sync-all=1', got {options!r}.",
            op="super_kernel", argument="options"
        )
    if scope is None and options.strip():
        warnings.warn(
            f"super_kernel(None, {options!r}): None turns SuperKernel off for the ops inside, so the options are "
            "never read; drop them, or name a scope to apply them.",
            OptionsWarning,
            stacklevel=2,
        )
    return _Scope([scopes.SK_SCOPE, scopes.SK_OPTIONS], ["" if scope is None else scope, options])


def npu_stream_switch(stream_tag: str, stream_priority: int = 0, enable_inner_parallel: bool = True) -> _Scope:
    """Run the ops inside on the stream named ``stream_tag``; the same tag means the same stream.

    ``stream_priority`` is documented as reserved (keep 0); we still model it as the stream's priority.
    ``enable_inner_parallel`` (TorchAir's default True; GE may split the ops inside over more streams,
    CANN > 9.0.0) is a max-autotune option: the graph's mode is checked when it is planned, and the model
    keeps the ops inside on the one stream either way.
    """
    if not isinstance(stream_tag, str) or not stream_tag:
        raise ScopeError(
            f"npu_stream_switch(stream_tag=...) takes a non-empty str such as '1', got {stream_tag!r}.",
            op="npu_stream_switch", argument="stream_tag",
        )
    if not isinstance(stream_priority, int) or isinstance(stream_priority, bool):
        raise ScopeError(
            f"npu_stream_switch({stream_tag!r}, stream_priority=...) takes an int, got {stream_priority!r}.",
            op="npu_stream_switch", argument="stream_priority",
        )
    if not isinstance(enable_inner_parallel, bool):
        raise ScopeError(
            f"npu_stream_switch({stream_tag!r}, enable_inner_parallel=...) "
            f"takes a bool, got {enable_inner_parallel!r}.",
            op="npu_stream_switch", argument="enable_inner_parallel"
        )
    return _Scope(
        [scopes.STREAM_LABEL, scopes.STREAM_PRIORITY, scopes.INNER_PARALLEL],
        [stream_tag, str(stream_priority), str(enable_inner_parallel)],
    )


def _core_count(name: str, value: object) -> int:
    """TorchAir accepts ints or digit strings; anything else is a user error worth naming."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        raise ScopeError(f"limit_core_num({name}=...) takes a non-negative int, got {value!r}.", op="limit_core_num",
        argument=name)
    return int(value)


def limit_core_num(op_aicore_num: int, op_vectorcore_num: int) -> _Scope:
    """Cap the Cube (AIC) and Vector (AIV) cores each op inside may use.

    Upper bounds against the hardware are checked when the graph is planned for a target.
    """
    aic = _core_count("op_aicore_num", op_aicore_num)
    aiv = _core_count("op_vectorcore_num", op_vectorcore_num)
    return _Scope([scopes.AICORE_NUM, scopes.VECTORCORE_NUM], [str(aic), str(aiv)])


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    """Make the ops after this point on the current stream wait for ``dependency``'s producer
    (max-autotune only, as in TorchAir). Returns ``self``'s values."""
    if not isinstance(self, torch.Tensor) or not isinstance(dependency, torch.Tensor):
        raise ScopeError("npu_wait_tensor(self, dependency) takes two tensors.", op="npu_wait_tensor")
    return syncs.WAIT_TENSOR(self, dependency)


def op_never_timeout(enable: bool = True) -> _Scope:
    """Mark the ops inside as never timing out (``_op_exec_never_timeout``). Recorded on each kernel; it
    changes no modeled number, and, as TorchAir documents, a SuperKernel does not inherit it."""
    if not isinstance(enable, bool):
        raise OpTypeError(
            f"op_never_timeout() argument 'enable' must be bool, but got {type(enable).__name__}.",
            op="op_never_timeout", argument="enable",
        )
    return _Scope([scopes.NEVER_TIMEOUT], [str(enable)])


def data_dump() -> _Scope:
    """Dump the inputs and outputs of the ops inside (with ``dump_config.enable_dump``, max-autotune; the
    ops of ``dump_layer`` too). Recorded on each kernel; :mod:`pytest_npufuse.torchair._datadump` writes the files,
    and the numbers do not change."""
    return _Scope([scopes.DATA_DUMP], ["True"])
