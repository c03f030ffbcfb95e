"""``torchair.ge_concrete_graph.ge_converter.experimental``: the compatibility modules that scripts import
for their side effect on torch.distributed (:mod:`.patch_for_hcom_allreduce`, :mod:`.hcom_allgather`),
as ``torchair.patch_for_hcom()`` does for every collective (:mod:`pytest_npufuse.torchair._hcom`)."""

from ....ge import refuse_in

__all__: list[str] = []
__getattr__ = refuse_in("torchair.ge_concrete_graph.ge_converter.experimental")
