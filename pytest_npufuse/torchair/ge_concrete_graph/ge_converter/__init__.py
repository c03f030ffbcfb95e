"""``torchair.ge_concrete_graph.ge_converter``: TorchAir's compatibility path of its GE converters; a
converter name is refused by name, as all of ``torchair.ge``; :mod:`.experimental` holds the modules
that patch torch.distributed."""

from ...ge import refuse_in

__all__: list[str] = []
__getattr__ = refuse_in("torchair.ge_concrete_graph.ge_converter")
