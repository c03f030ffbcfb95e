"""``torchair._acl_concrete_graph``: of TorchAir's private aclgraph package, only the module user code
writes to, :mod:`.graph_pass` (its registry of reinplaceable ops); the rest (``AclConcreteGraph``, the
graph capture, its FX passes) is TorchAir's machinery, which importing names as not modeled."""
