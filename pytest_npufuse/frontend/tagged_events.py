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
    reports a duplicate tag; the pytest plugin resets it before every test so that parametrized and
    repeated tests (and xdist's reused workers) each start clean, while a duplicate within one test
    is still an error."""

    def __init__(self) -> None:
        self._events: dict[str, TaggedEvent] = {}

    def create(self, tag: str) -> TaggedEvent:
        if tag in self._events:
            raise ScopeError(f"tagged event tag {tag} is already in use; give each npu_create_tagged_event a new tag.")
        self._events[tag] = TaggedEvent(tag)
        return self._events[tag]

    def tags(self) -> Sequence[str]:
        return tuple(self._events)

    def is_registered(self, event: object) -> bool:
        return isinstance(event, TaggedEvent) and self._events.get(event.tag) is event

    def reset(self) -> None:
        self._events.clear()


EVENTS = EventRegistry()
