"""``torch_npu.onnx``: importing it makes ``torch.onnx.export`` export the torch_npu ops.

As torch_npu's module does, the import re-binds ops of the ``torch_npu`` package in two ways:

* :mod:`.custom_nodes`: the op becomes an autograd function whose ``symbolic`` writes one node of the
  ``npu`` ONNX domain (``npu::NPURmsNorm``, ...) with the op's scalars as attributes, the graph an
  Ascend toolchain reads back;
* :mod:`.decomposed`: while an export runs, the op is computed with standard torch ops
  (``npu_layer_norm_eval`` as ``layer_norm``, ``npu_confusion_transpose`` as view + permute), so the
  ONNX graph holds standard operators.

Outside an export every re-bound op computes what it did before. The ``symbolic`` functions serve the
TorchScript exporter, ``torch.onnx.export(..., dynamo=False)``, which writes the file with the ``onnx``
package. torch 2.13's default exporter (``dynamo=True``) traces with ``torch.export`` and does not read
them; as with torch_npu, it stops at an ``npu::`` op it has no translation for.

Source: Ascend/pytorch ``torch_npu/onnx/`` (``wrapper_onnx_ops.py``: node names, inputs, attribute names
and the placeholders of absent optional inputs; ``wrapper_ops_combined.py``: the decompositions) at
``9e73e708ab93``. The ops torch_npu wraps that this package does not model are not wrapped.
"""

from __future__ import annotations

from .custom_nodes import export_as_custom_nodes
from .decomposed import export_decomposed

__all__: list[str] = []

export_as_custom_nodes()
export_decomposed()
