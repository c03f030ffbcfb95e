"""``npugraph_ex._acl_concrete_graph.replace_stream_event``: npugraph_ex's own graph counter (a package
of its own, so a count of its own), and the stream pass refused by name as TorchAir's is
(:mod:`pytest_npufuse.torchair._acl_concrete_graph.replace_stream_event`)."""

from __future__ import annotations

from ...torchair._acl_concrete_graph import replace_stream_event as _torchair
from ...torchair._internal import refused_function

__all__: list[str] = []


class GraphCounter(_torchair.GraphCounter):
    """npugraph_ex's graph count (TorchAir's class, counted apart)."""

    COUNT = -1


replace_stream_event_pass = refused_function("npugraph_ex._acl_concrete_graph.replace_stream_event.replace_stream_event_pass")
