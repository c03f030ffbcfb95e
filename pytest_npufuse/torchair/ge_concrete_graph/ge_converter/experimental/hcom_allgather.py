"""Importing ``torchair.ge_concrete_graph.ge_converter.experimental.hcom_allgather`` makes
``torch.distributed.all_gather`` and ``all_gather_into_tensor`` traceable into the graph and warns once
that the ``ge_concrete_graph`` paths are going away, as TorchAir's module of that path does (torchair:
python/torchair/ge_concrete_graph/ge_converter/experimental/hcom_allgather.py, commit fced8842)."""

from ...._hcom import patch_all_gather
from ....core.utils import logger

__all__: list[str] = []

logger.warning(
    "The usage of torchair.ge_concrete_graph .* will not be supported in the future, please complete the API "
    "switch as soon as possible."
)
patch_all_gather()
