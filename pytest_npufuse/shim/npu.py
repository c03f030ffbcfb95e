"""``torch.npu`` on the CPU: device queries, streams, events and the npugraph_ex SuperKernel markers.

Installed as ``torch.npu`` (and ``torch_npu.npu``) by :func:`pytest_npufuse.install_shims`. The CPU runs
one op at a time, so in eager code streams and events are already satisfied: ``query()`` is True and
``synchronize()`` returns. Inside ``torch.compile`` they become the graph's stream scopes and sync ops,
which the backend models exactly as TorchAir's aclgraph pass turns them into tagged events (torchair:
python/torchair/_acl_concrete_graph/replace_stream_event.py): ``with torch.npu.stream(s)`` is a stream
scope, ``Event.record/wait`` are events on a stream, ``Tensor.record_stream(s)`` keeps memory alive for
``s``. A ``torch.npu`` name we do not model is an error naming it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace, TracebackType
from typing import Any, NamedTuple

import torch

from ..errors import NotModeledAttributeError, NotModeledError, OpArgumentError, ScopeError
from ..gaps import missing
from ..frontend import scopes
from ..session import Scope, SessionKey, current_session
from ..simulate.clock import device_clock
# torch_npu.npu.profile: method three of docs/feature-docs.md#scope-analysis
from ..torch_npu.profiler import profile  # noqa: F401
from .devices import SELECTED, check_index, device_index, node_devices

# A package path, so that ``import torch_npu.npu.utils`` (:mod:`.npu_utils`) finds its parent; the shim's
# import finder answers for the submodule by its full name.
__path__: list[str] = []
DEFAULT_STREAM = scopes.DEFAULT_STREAM
# TorchAir's limits for super_kernel_scope_begin names (docs/sources.md#torchair-2026-2).
MAX_SCOPE_NAME_BYTES = 255
# Streams and events are equal when their tags are, so a tag is never made twice in the process, whatever
# the session (a stream made at a module's import outlives the test that imports it).
_TAG_COUNTERS = SessionKey(
    "stream and event tag counters", lambda: {"stream": itertools.count(1), "event": itertools.count(1)}, Scope.PROCESS
)


@torch.compiler.assume_constant_result
def _new_tag(kind: str) -> str:
    """A fresh tag per object. Dynamo calls it once while tracing and keeps the result as a constant,
    so a stream created inside ``forward`` neither guards on the counter nor recompiles every call."""
    return f"npu_{kind}_{next(current_session()[_TAG_COUNTERS][kind])}"


class Stream:
    """``torch.npu.Stream(device=None, priority=0)``: a stream named by a tag in the graph."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs: Any) -> None:
        check_index(device, "torch.npu.Stream")
        if kwargs:
            raise NotModeledError(
                f"torch.npu.Stream({', '.join(kwargs)}=...) is not modeled; pass device and priority.",
                op="torch.npu.Stream",
            )
        self.tag = _new_tag("stream")
        # Kept as text: Dynamo makes an int attribute of a compiled function's input a symbolic size under
        # dynamic=True, and a stream passed in must stay a constant label of the graph.
        self._priority = str(int(priority))

    @classmethod
    def _named(cls, tag: str) -> "Stream":
        stream = cls.__new__(cls)
        stream.tag, stream._priority = tag, "0"
        return stream

    @property
    def priority(self) -> int:
        return int(self._priority)

    @property
    def stream_id(self) -> int:
        """torch_npu's stream id: 0 for the default stream, then one number per stream made."""
        ids = _streams().ids
        return ids.setdefault(self.tag, len(ids))

    @property
    def device_index(self) -> int:
        """The one modeled NPU."""
        return 0

    @property
    def device_type(self) -> int:
        """torch's device type of ``npu`` streams (PrivateUse1), as torch_npu reports it."""
        return int(torch._C._autograd.DeviceType.PrivateUse1)

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        """This stream's later work waits for what ``stream`` issued so far."""
        event = Event()
        event.record(stream)
        event.wait(self)

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for: the CPU has finished everything it was given."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)

    def __repr__(self) -> str:
        return f"torch.npu.Stream({self.tag!r}, priority={self.priority})"


_DEFAULT = Stream._named(DEFAULT_STREAM)


@dataclass
class _Streams:
    """A session's streams: torch_npu's stream ids (numbered as first asked for), and the stream switches
    in effect, innermost last (a test's ``set_stream`` left in effect does not reach the next test)."""

    ids: dict[str, int] = field(default_factory=lambda: {DEFAULT_STREAM: 0})
    switches: list["_Switch"] = field(default_factory=list)


STREAMS = SessionKey("streams", _Streams)


def _streams() -> _Streams:
    return current_session()[STREAMS]


def _tag_of(stream: object, api: str) -> str:
    if stream is None:
        return ""
    if not isinstance(stream, Stream):
        raise ScopeError(f"{api} takes a torch.npu.Stream, got {type(stream).__name__}.")
    return stream.tag


class Event:
    """``torch.npu.Event()``: recorded on one stream, waited on by others."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        if interprocess:
            raise NotModeledError(
                "torch.npu.Event(interprocess=True) is not modeled: the model has one process.",
                op="torch.npu.Event", argument="interprocess",
            )
        self.tag = _new_tag("event")
        self.enable_timing = enable_timing
        self.recorded_s: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record after the work issued so far on ``stream`` (default: the current stream). Recorded
        outside a compiled function, it also notes the modeled device time, for :meth:`elapsed_time`."""
        torch.ops.npufuse.event_record(self.tag, _tag_of(stream, "torch.npu.Event.record(stream)"))
        if not torch.compiler.is_compiling():
            self.recorded_s = device_clock()()

    def wait(self, stream: Stream | None = None) -> None:
        """Make the later work of ``stream`` (default: the current one) wait for the last record."""
        torch.ops.npufuse.event_wait(self.tag, _tag_of(stream, "torch.npu.Event.wait(stream)"))

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for on the CPU."""

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds of modeled device time between this record and ``end_event``'s: the modeled time
        of the graphs called in between (eager ops outside a compiled graph take no modeled time)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise OpArgumentError(
                "elapsed_time needs both events created with torch.npu.Event(enable_timing=True).",
                op="torch.npu.Event.elapsed_time", argument="enable_timing",
            )
        if self.recorded_s is None or end_event.recorded_s is None:
            raise OpArgumentError(
                "elapsed_time needs both events recorded outside the "
                "compiled function (event.record() around the call).",
                op="torch.npu.Event.elapsed_time", argument="end_event"
            )
        return (end_event.recorded_s - self.recorded_s) * 1e3

    def __repr__(self) -> str:
        return f"torch.npu.Event({self.tag!r})"


class _Switch(NamedTuple):
    """One stream switch in effect: the stream, and whether ``torch.npu.set_stream`` made it (rather than
    a ``with torch.npu.stream(s):`` block)."""

    stream: Stream
    by_set_stream: bool


def _enter(stream: Stream, by_set_stream: bool) -> None:
    _streams().switches.append(_Switch(stream, by_set_stream))
    torch.ops.npufuse.scope_enter(
        [scopes.STREAM_LABEL, scopes.STREAM_PRIORITY, scopes.NATIVE_STREAM], [stream.tag, stream._priority, scopes.BY_SET_STREAM if by_set_stream else scopes.BY_WITH_BLOCK]
    )


def _leave() -> None:
    torch.ops.npufuse.scope_exit()
    _streams().switches.pop()


class _StreamContext:
    """``with torch.npu.stream(s):`` -- the ops inside run on ``s`` (a stream scope in the graph)."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            _enter(self.stream, by_set_stream=False)
        return self.stream

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.stream is None:
            return
        switches = _streams().switches
        if switches and switches[-1].by_set_stream:
            raise ScopeError(
                f"torch.npu.set_stream({switches[-1].stream!r}) inside `with torch.npu.stream({self.stream!r}):` is "
                "still in effect where the block ends; set the stream back (torch.npu.set_stream with the stream "
                "the block runs on) before leaving it.", op="torch.npu.set_stream"
            )
        _leave()


def stream(stream: Stream | None) -> _StreamContext:
    """``torch.npu.stream(s)``: a context manager running the ops inside on ``s`` (None: no change)."""
    _tag_of(stream, "torch.npu.stream(stream)")
    return _StreamContext(stream)


def current_stream(device: object = None) -> Stream:
    check_index(device, "torch.npu.current_stream")
    switches = _streams().switches
    return switches[-1].stream if switches else _DEFAULT


def default_stream(device: object = None) -> Stream:
    check_index(device, "torch.npu.default_stream")
    return _DEFAULT


def set_stream(stream: Stream) -> None:
    """``torch.npu.set_stream(s)``: the ops issued after it run on ``s`` until the next ``set_stream``.

    Inside a compiled function this is a stream scope from this call to the next switch, as npugraph_ex
    turns it into one (torchair: npugraph_ex/_acl_concrete_graph/replace_stream_event.py). As there, the
    function must set the stream back to the one it began on before it returns; otherwise the scope is
    left open and capture fails naming the stream."""
    if stream is None:
        raise ScopeError("torch.npu.set_stream(stream) takes a torch.npu.Stream, got None.", op="torch.npu.set_stream")
    _tag_of(stream, "torch.npu.set_stream(stream)")
    switches = _streams().switches
    while switches and switches[-1].by_set_stream:
        _leave()
    if stream != current_stream():
        _enter(stream, by_set_stream=True)


def _scope_name(scope_name: object, api: str) -> None:
    if scope_name is not None and not isinstance(scope_name, str):
        raise ScopeError(f"torch.npu.{api}(scope_name) takes a str or None, got {scope_name!r}.")
    if isinstance(scope_name, str) and len(scope_name.encode()) > MAX_SCOPE_NAME_BYTES:
        raise ScopeError(f"torch.npu.{api}: scope_name is longer than {MAX_SCOPE_NAME_BYTES} bytes: {scope_name[:40]!r}...")


def super_kernel_scope_begin(scope_name: str | None) -> None:
    """Begin the SuperKernel range ``scope_name`` (npugraph_ex; None: no fusion for the ops after it).
    Ranges are paired with their end by name, in any order."""
    _scope_name(scope_name, "super_kernel_scope_begin")
    torch.ops.npufuse.super_kernel_scope_begin(scope_name)


def super_kernel_scope_end(scope_name: str | None) -> None:
    """End the SuperKernel range begun with the same ``scope_name``."""
    _scope_name(scope_name, "super_kernel_scope_end")
    torch.ops.npufuse.super_kernel_scope_end(scope_name)


def is_available() -> bool:
    return True


def device_count() -> int:
    """The NPUs of one node of the target (A2 server: 8; A3 SuperPoD node: 16 dies); a process computes as
    one of them, the one :func:`set_device` chose."""
    return node_devices()


def current_device() -> int:
    return SELECTED["index"]


def get_device_name(device: object = None) -> str:
    """The SoC of the modeled target (its CANN platform name, e.g. ``Ascend910_9391`` for an A3 die)."""
    from ..pipeline.backend import current_profile

    check_index(device, "torch.npu.get_device_name")
    return current_profile().soc


def is_bf16_supported() -> bool:
    """Atlas A2 and A3 Cubes take bfloat16 (docs/sources.md#hw-1-2 lists their bf16 peak)."""
    return True


def set_device(device: object) -> None:
    """Compute as NPU ``device`` from now on in this process (multi-rank code: ``set_device(rank)``)."""
    SELECTED["index"] = device_index(device, "torch.npu.set_device")


def synchronize(device: object = None) -> None:
    """Nothing to wait for: the CPU has finished everything it was given."""
    check_index(device, "torch.npu.synchronize")


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


manual_seed_all = manual_seed


def empty_cache() -> None:
    """No device memory to release on the CPU (the modeled allocator lives inside each graph)."""


def set_compile_mode(jit_compile: bool = False) -> None:
    """torch_npu's op-compilation switch: it changes how kernels are built, not what they compute."""


# ``torch.npu.config.allow_internal_format = ...``: a layout switch with no effect on the values. Nothing
# reads it, so it is no state of the model; it is an attribute for user code to set, as torch_npu's is.
config = SimpleNamespace(allow_internal_format=False)


def record_stream(tensor: torch.Tensor, stream: Stream) -> None:
    """``Tensor.record_stream(s)`` for our streams: keep ``tensor``'s memory alive for ``s``'s work."""
    torch.ops.npufuse.record_stream(tensor, _tag_of(stream, "Tensor.record_stream(stream)"))


def __getattr__(name: str) -> Any:
    if name == "npugraph_ex":
        # ``torch.npu.npugraph_ex``: the npugraph_ex package (``compile_fx``, ``inference``,
        # ``scope.limit_core_num``), imported when first asked for: torch.npu is installed the moment torch
        # is imported, which may be in the middle of ``import torchair``, whose config npugraph_ex uses.
        from .. import npugraph_ex

        return npugraph_ex
    if name.startswith("__"):
        raise AttributeError(name)
    has = f"its CPU torch.npu has: {', '.join(PROVIDED)}"
    error = NotModeledAttributeError(f"torch.npu.{name} is not modeled by pytest-npufuse ({has}).")
    return missing(error, "name", f"torch.npu.{name}", f"pytest-npufuse does not model it ({has})")


PROVIDED = (
    "Stream", "Event", "stream", "current_stream", "default_stream", "super_kernel_scope_begin",
    "super_kernel_scope_end", "set_stream", "is_available", "device_count", "current_device", "get_device_name",
    "is_bf16_supported", "set_device", "synchronize",
    "manual_seed", "manual_seed_all", "empty_cache", "set_compile_mode", "config", "npugraph_ex",
)
