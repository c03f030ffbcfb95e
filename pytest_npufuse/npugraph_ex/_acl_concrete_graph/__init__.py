"""``npugraph_ex._acl_concrete_graph``: as ``torchair._acl_concrete_graph``, only :mod:`.graph_pass`, the
reinplace registry user code writes to (one registry for both backends: they are one model here)."""
