"""``npugraph_ex.scope``: ``limit_core_num``, TorchAir's core-limit scope (also reachable as
``torch.npu.npugraph_ex.scope.limit_core_num``)."""

from ...torchair.scope import limit_core_num

__all__ = ["limit_core_num"]
