"""``torch_npu.onnx``: after its import, the TorchScript exporter writes torch_npu's ``npu::`` nodes (or
standard operators for the decomposed ops), and outside an export every op computes what it did."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import onnx
import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.errors import OpArgumentError

MODULE = "pytest_npufuse.torch_npu.onnx"  # imported by the fixture only: importing it re-binds ops


@pytest.fixture
def exporting():
    """``import torch_npu.onnx`` for one test; yields the ops it re-bound, as they were before. They are
    put back afterwards, and the next import runs the module again."""
    before = {name: getattr(torch_npu, name) for name in torch_npu.__all__}
    importlib.import_module(MODULE)
    rebound = {name: op for name, op in before.items() if getattr(torch_npu, name) is not op}
    yield rebound
    for name, op in rebound.items():
        setattr(torch_npu, name, op)
    for name in [n for n in sys.modules if n == MODULE or n.startswith(f"{MODULE}.")]:
        del sys.modules[name]
    vars(torch_npu).pop("onnx", None)


class _Call(torch.nn.Module):
    def __init__(self, call) -> None:
        super().__init__()
        self.call = call

    def forward(self, *inputs):
        return self.call(*inputs)


def _nodes(tmp_path: Path, call, *inputs) -> list[onnx.NodeProto]:
    path = tmp_path / "model.onnx"
    with torch.no_grad():
        torch.onnx.export(_Call(call).eval(), inputs, str(path), opset_version=11, dynamo=False)
    return list(onnx.load(str(path)).graph.node)


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def test_rms_norm_exports_as_one_npu_node_with_its_epsilon(exporting, tmp_path: Path) -> None:
    x, gamma = torch.rand(4, 64, dtype=torch.float16), torch.rand(64, dtype=torch.float16)
    nodes = _nodes(tmp_path, lambda x, g: torch_npu.npu_rms_norm(x, g, 1e-5)[0], x, gamma)
    assert [(n.domain, n.op_type) for n in nodes] == [("npu", "NPURmsNorm")]
    assert _attributes(nodes[0])["epsilon"] == pytest.approx(1e-5)
    assert len(nodes[0].output) == 2


def test_absent_optional_inputs_become_empty_constants_and_dtypes_acl_codes(exporting, tmp_path: Path) -> None:
    x = torch.rand(4, 64, dtype=torch.float16)
    nodes = _nodes(tmp_path, lambda x: torch_npu.npu_dynamic_quant(x, dst_type=torch.quint4x2)[0], x)
    quant = nodes[-1]
    assert (quant.op_type, _attributes(quant)["dst_type"], len(quant.input)) == ("NPUDynamicQuant", 3, 3)
    constants = [onnx.numpy_helper.to_array(_attributes(n)["value"]) for n in nodes[:-1]]
    assert [(c.size, str(c.dtype)) for c in constants] == [(0, "float16"), (0, "int32")]


def test_decomposed_ops_export_as_standard_operators(exporting, tmp_path: Path) -> None:
    x = torch.rand(1, 8, 12)
    nodes = _nodes(tmp_path, lambda x: torch_npu.npu_confusion_transpose(x, (0, 2, 1, 3), [1, 8, 3, 4], False), x)
    assert [n.op_type for n in nodes][-2:] == ["Reshape", "Transpose"]
    assert all(n.domain == "" for n in nodes)


def test_re_bound_ops_keep_their_signature_and_results(exporting) -> None:
    assert {"npu_rms_norm", "fast_gelu", "npu_moe_finalize_routing", "npu_layer_norm_eval"} <= set(exporting)
    for name, op in exporting.items():
        assert inspect.signature(getattr(torch_npu, name)) == inspect.signature(op), name
    x, gamma = torch.rand(4, 64), torch.rand(64)
    assert torch.equal(torch_npu.npu_rms_norm(x, gamma)[0], exporting["npu_rms_norm"](x, gamma)[0])
    y = torch.rand(2, 6, 4)
    assert torch.equal(
        torch_npu.npu_layer_norm_eval(y, [4], eps=1e-5), exporting["npu_layer_norm_eval"](y, [4], eps=1e-5)
    )


def test_an_argument_torch_npus_exporter_refuses_is_named(exporting, tmp_path: Path) -> None:
    x, scale = torch.randint(-8, 8, (4, 16), dtype=torch.int8), torch.rand(16, dtype=torch.float32)
    with pytest.raises(OpArgumentError) as exc:
        _nodes(tmp_path, lambda x, s: torch_npu.npu_anti_quant(x, s, dst_dtype=torch.float32), x, scale)
    assert (exc.value.op, exc.value.argument) == ("npu_anti_quant", "dst_dtype")
