"""TorchAir's tagged events (``torchair.ops.npu_create_tagged_event``) and the process's registry of their tags.

Plain Python, no torch: the pytest plugin resets the registry before every test without loading torch."""

from __future__ import annotations

from typing import Sequence

from ..errors import ScopeError


class TaggedEvent:
    """An event named by a tag, as ``torchair.ops.npu_create_tagged_event`` returns."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __repr__(self) -> str:
        return f"TaggedEvent({self.tag!r})"


class EventRegistry:
    """Tags in use. TorchAir's registry is process-global, so building a model twice in one process
    reports a duplicate tag; the pytest plugin starts every test with the events of earlier tests
    dropped, so that parametrized and repeated tests (and xdist's reused workers) each start clean,
    while a duplicate within one test is still an error. An event created outside a test (at a test
    module's import, during collection) or at any module's top level lasts for the session, as a
    module-level ``EVENT = npu_create_tagged_event("e")`` used by later tests needs."""

    def __init__(self) -> None:
        self._events: dict[str, TaggedEvent] = {}
        self._lasting: set[str] = set()
        self._in_test = False

    def create(self, tag: str, at_module_level: bool = False) -> TaggedEvent:
        if tag in self._events:
            raise ScopeError(
                f"tagged event tag {tag} is already in use; give each npu_create_tagged_event a new tag.",
                op="npu_create_tagged_event", argument="tag",
            )
        self._events[tag] = TaggedEvent(tag)
        if at_module_level or not self._in_test:
            self._lasting.add(tag)
        return self._events[tag]

    def tags(self) -> Sequence[str]:
        return tuple(self._events)

    def is_registered(self, event: object) -> bool:
        return isinstance(event, TaggedEvent) and self._events.get(event.tag) is event

    def reset(self) -> None:
        """A test starts: events earlier tests created are dropped; lasting ones stay."""
        self._events = {tag: event for tag, event in self._events.items() if tag in self._lasting}
        self._in_test = True

    def end_test(self) -> None:
        """A test ended: what is created until the next one (at collection, at import) lasts."""
        self.reset()
        self._in_test = False

    def clear(self) -> None:
        """Drop every event, lasting ones too: a new session or script starts as a fresh process."""
        self._events.clear()
        self._lasting.clear()
        self._in_test = False


EVENTS = EventRegistry()
