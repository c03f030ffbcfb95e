"""TorchAir's tagged events (``torchair.ops.npu_create_tagged_event``) and the registry of their tags, one per
session (:mod:`pytest_npufuse.session`).

Plain Python, no torch: the pytest plugin starts each test's registry without loading torch."""

from __future__ import annotations

from ..errors import ScopeError
from ..session import Scope, SessionKey, current_session


class TaggedEvent:
    """An event named by a tag, as ``torchair.ops.npu_create_tagged_event`` returns."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __repr__(self) -> str:
        return f"TaggedEvent({self.tag!r})"


class EventRegistry:
    """Tags in use. TorchAir's registry is process-global, so building a model twice in one process
    reports a duplicate tag. Here a test's (or a check's) registry sees the tags of the run it is in
    (``lasting``) and adds its own, which go with the test: parametrized and repeated tests (and xdist's
    reused workers) each start clean, while a duplicate within one test is still an error. An event created
    at any module's top level lasts for the run, as a module-level ``EVENT = npu_create_tagged_event("e")``
    used by later tests needs, and so does one created outside any test (at a test module's import, during
    collection), since the run's own registry is current then."""

    def __init__(self, lasting: EventRegistry | None = None) -> None:
        self._events: dict[str, TaggedEvent] = {}
        self._lasting = lasting

    def create(self, tag: str, at_module_level: bool = False) -> TaggedEvent:
        if self._find(tag) is not None:
            raise ScopeError(
                f"tagged event tag {tag} is already in use; give each npu_create_tagged_event a new tag.",
                op="npu_create_tagged_event", argument="tag",
            )
        owner = self
        while at_module_level and owner._lasting is not None:
            owner = owner._lasting
        event = owner._events[tag] = TaggedEvent(tag)
        return event

    def _find(self, tag: str) -> TaggedEvent | None:
        found = self._events.get(tag)
        if found is None and self._lasting is not None:
            return self._lasting._find(tag)
        return found

    def is_registered(self, event: object) -> bool:
        return isinstance(event, TaggedEvent) and self._find(event.tag) is event


EVENTS = SessionKey("tagged events", EventRegistry, Scope.NESTED, nest=EventRegistry)


def tagged_events() -> EventRegistry:
    """The current session's tagged events."""
    return current_session()[EVENTS]
