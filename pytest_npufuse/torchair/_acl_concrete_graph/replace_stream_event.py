"""``torchair._acl_concrete_graph.replace_stream_event``: TorchAir's pass that rewrites a graph's stream
and event calls into its tagged-event ops, and the counter whose ``graph_<n>_`` prefix names each
graph's events (torchair: python/torchair/_acl_concrete_graph/replace_stream_event.py, commit fced8842).

The model turns streams and events into its own scopes and events when it captures the graph
(:mod:`pytest_npufuse.frontend.scopes`), so the pass is refused by name; the counter is kept, since
tests reset it before each case (``GraphCounter.set_graph_id(-1)``), and counts as TorchAir's does.
"""

from __future__ import annotations

from typing import ClassVar

from .._internal import refused_function

__all__: list[str] = []


class GraphCounter:
    """The graph count: ``graph_id()`` advances it and returns the prefix ``graph_<n>_`` of the next
    graph; ``set_graph_id(n)`` sets it (-1 starts over at 0)."""

    COUNT: ClassVar[int] = -1

    @classmethod
    def graph_id(cls) -> str:
        cls.COUNT += 1
        return f"graph_{cls.COUNT}_"

    @classmethod
    def set_graph_id(cls, value: int) -> None:
        cls.COUNT = value


replace_stream_event_pass = refused_function("torchair._acl_concrete_graph.replace_stream_event.replace_stream_event_pass")
