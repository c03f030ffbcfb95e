"""Importing ``torchair.ge_concrete_graph.ge_converter.experimental.patch_for_hcom_allreduce`` makes
``torch.distributed.all_reduce`` (and deepspeed's, when installed) traceable into the graph, as TorchAir's
module of that path does when imported (torchair: python/torchair/ge_concrete_graph/ge_converter/experimental/
patch_for_hcom_allreduce.py, commit fced8842); :mod:`pytest_npufuse.torchair._hcom` has the behaviour."""

from ...._hcom import patch_all_reduce

__all__: list[str] = []

patch_all_reduce()
