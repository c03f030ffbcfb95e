"""The modeled process's state, held in one object: a :class:`Session`.

Code written for a real NPU talks to one device from one process: ``torch.npu.Event`` reads the device's
clock, ``torchair.ops.npu_create_tagged_event`` registers its tag process-wide, ``torch_npu.profiler.profile``
collects the graphs run while it is open, ``torch.npu.set_stream`` switches the stream of what follows, and
CANN names one plog file per process. The model keeps each of these in the current session, never in a
module global, so a check, a test or a script sees only its own and nothing is ever reset by hand:

- the pytest plugin starts one session per pytest run, kept on ``config.stash`` (as pytest-xdist keeps its
  ``DSession``), and one per test inside it;
- ``compare`` (and so ``npufuse.check``) runs in a session of its own inside the caller's;
- ``python -m pytest_npufuse run`` runs its script in a new session;
- a library user opens one with ``with Session(current_session()):`` around what should not leak.

Outside all of these, the process's first session (:func:`current_session` with nothing opened) is current.

Each piece of state is declared once, by the module that owns it, as a :class:`SessionKey` (as pytest
declares a ``StashKey``): this module stays at the bottom of the layers and knows none of them. The key's
:class:`Scope` says what a session started inside another begins with. A session is current for the whole
process, not per thread, as the module globals it replaces were: ``compare``'s worker thread sees its caller's.
"""

from __future__ import annotations

import enum
import functools
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Scope(enum.Enum):
    """What a session started inside another begins a piece of state with."""

    OWN = "own"
    """A new value: the device clock, the profiles in progress, the streams and the current stream."""
    NESTED = "nested"
    """A value made from the parent's (:attr:`SessionKey.nest`), unless the session starts a modeled process:
    the tagged events, where a test's or a check's own are dropped with it and the run's stay visible."""
    INHERITED = "inherited"
    """The parent's value itself, until the session sets its own: the target the code runs on, the script
    run collecting backends."""
    PROCESS = "process"
    """One value for the whole Python process, in its first session: what belongs to the real process, not
    the modeled one (the shim's changes to ``sys.meta_path`` and torch, files named by the process id, the
    counters that keep stream and event tags unique)."""


@dataclass(frozen=True, eq=False)
class SessionKey(Generic[T]):
    """One piece of the modeled process's state, declared by the module that owns it. ``new`` makes the
    value a session starts with; ``nest`` (for :attr:`Scope.NESTED`) makes it from the parent's."""

    name: str
    new: Callable[[], T]
    scope: Scope = Scope.OWN
    nest: Callable[[T], T] | None = None

    def __post_init__(self) -> None:
        with _LOCK:
            _DECLARED.append(self)
            for session in _OPEN:
                session.start(self)


class Session:
    """The state of one modeled process (``process=True``: a pytest run, a script run, the Python process's
    first session) or of one test or check inside it (started from its ``parent``'s state, see :class:`Scope`).

    ``session[key]`` is the session's value of ``key``; ``with session:`` (or :meth:`open` and :meth:`close`)
    makes it the current session. A session starts every declared piece when it is made (and an open one
    each piece declared later, when its module is imported): Dynamo, tracing a model that switches streams,
    then finds the state there and does not guard on its being made.
    """

    def __init__(self, parent: Session | None = None, *, process: bool = False) -> None:
        self.parent = parent
        self.process = process or parent is None
        self._values: dict[str, Any] = {}
        for key in tuple(_DECLARED):
            self.start(key)

    def __getitem__(self, key: SessionKey[T]) -> T:
        if key.scope is Scope.PROCESS and self is not _OPEN[0]:
            return _OPEN[0][key]
        values = self._values
        if key.name not in values:
            values[key.name] = self._first_value(key)
        return values[key.name]

    def __setitem__(self, key: SessionKey[T], value: T) -> None:
        """Set this session's own value of ``key``; the sessions made inside it from now on inherit it."""
        if key.scope is Scope.PROCESS and self is not _OPEN[0]:
            _OPEN[0][key] = value
            return
        self._values[key.name] = value

    def start(self, key: SessionKey[Any]) -> None:
        """Make the session's value of ``key`` now, if it has none yet."""
        self.__getitem__(key)

    def _first_value(self, key: SessionKey[T]) -> T:
        parent = self.parent
        if parent is None or key.scope is Scope.OWN:
            return key.new()
        if key.scope is Scope.NESTED:
            return key.new() if self.process or key.nest is None else key.nest(parent[key])
        return parent[key]

    def open(self) -> Session:
        """Make this the current session, until :meth:`close`."""
        with _LOCK:
            _OPEN.append(self)
        return self

    def close(self) -> None:
        """Stop being the current session: the one opened before it is current again. A session opened
        inside it and left open (a nested pytest run that crashed before its unconfigure) closes with it."""
        with _LOCK:
            if any(opened is self for opened in _OPEN[1:]):
                while _OPEN.pop() is not self:
                    pass

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "process" if self.process else "inside"
        return f"Session({kind}, {sorted(self._values)})"


# Every key, in the order the modules owning them declared them at import (declarations, as the op registry's).
_DECLARED: list[SessionKey[Any]] = []
# The sessions opened, innermost last; the first is the Python process's own and is never closed. This
# stack is the one module-level state of the model: everything else lives in the sessions on it.
_OPEN: list[Session] = [Session()]
_LOCK = threading.RLock()


def current_session() -> Session:
    """The session the running code's state lives in: the innermost one opened."""
    return _OPEN[-1]


def in_session(function: Callable[..., T]) -> Callable[..., T]:
    """``function`` run in a session of its own inside the current one, so what it leaves behind (tagged
    events, streams, profiles, device time) goes with it."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> T:
        with Session(current_session()):
            return function(*args, **kwargs)

    return run
