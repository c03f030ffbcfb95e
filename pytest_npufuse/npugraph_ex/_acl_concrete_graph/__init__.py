"""``npugraph_ex._acl_concrete_graph``: as ``torchair._acl_concrete_graph`` (npugraph_ex ships the same
package): :mod:`.graph_pass` (one registry for both backends: they are one model here), :mod:`.utils`,
:mod:`.replace_stream_event`, and TorchAir's machinery, importable and refused by name under
npugraph_ex's paths."""

from __future__ import annotations

from ...torchair._acl_concrete_graph import machinery_modules
from ...torchair._internal import build_modules

build_modules(__name__, machinery_modules("npugraph_ex"))
