"""Each op's schema is declared once in torch_npu/schemas.toml; what the registry registers must stay torch_npu's.

``torch_npu_schemas.txt`` holds torch_npu's schema of every declared op (op-plugin's
``op_plugin_functions.yaml`` and the API pages; one line per registered op, ``<name>_functional`` included),
as the op declarations wrote them by hand before the registry derived them. A declaration whose signature
drifts from torch_npu's (a renamed keyword, a default, ``int`` for ``SymInt``) fails here, and so does an
op added without its torch_npu schema.
"""

from pathlib import Path

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.torch_npu.registry import NAMESPACE, OPS

TORCH_NPU_SCHEMAS = {
    line.split("(", 1)[0]: line
    for line in (Path(__file__).parent / "torch_npu_schemas.txt").read_text().splitlines()
    if line
}


def _registered_names() -> list[str]:
    """Every registered op, ``<name>_functional`` and each other overload (``<name>.<Overload>``) included."""
    # an in-place op's graph op is its functional op's own (scatter_update_ -> scatter_update): listed once
    names = list(dict.fromkeys(name for op in OPS.values() for name in (op.name, op.graph_name or op.name)))
    return names + [f"{op.name}.{overload}" for op in OPS.values() for overload in op.overloads]


@pytest.mark.parametrize("name", _registered_names())
def test_derived_schema_is_torch_npus(name: str) -> None:
    assert name in TORCH_NPU_SCHEMAS, f"add torch_npu's schema of {name} to torch_npu_schemas.txt"
    op, _, overload = name.partition(".")
    registered = getattr(getattr(getattr(torch.ops, NAMESPACE), op), overload or "default")._schema
    expected = torch._C.parse_schema(f"{NAMESPACE}::{TORCH_NPU_SCHEMAS[name]}")
    assert str(registered) == str(expected)


def test_every_recorded_schema_is_declared() -> None:
    assert sorted(TORCH_NPU_SCHEMAS) == sorted(_registered_names())


def test_ops_command_shows_the_derived_public_schema() -> None:
    for op in OPS.values():
        assert str(torch._C.parse_schema(op.schema)) == str(torch._C.parse_schema(TORCH_NPU_SCHEMAS[op.name]))


def test_argument_errors_are_package_errors_and_still_value_and_type_errors() -> None:
    from pytest_npufuse.errors import NpufuseError, OpArgumentError, OpTypeError

    with pytest.raises(OpArgumentError) as bad_value:
        torch_npu.npu_rms_norm(torch.ones(2, 4, dtype=torch.int32), torch.ones(4))
    assert (bad_value.value.op, bad_value.value.argument) == ("npu_rms_norm", "input")
    with pytest.raises(OpTypeError) as bad_type:
        torch_npu.npu_rms_norm(torch.ones(2, 4), torch.ones(4), epsilon="1e-6")
    assert (bad_type.value.op, bad_type.value.argument) == ("npu_rms_norm", "epsilon")
    assert isinstance(bad_value.value, ValueError) and isinstance(bad_value.value, NpufuseError)
    assert isinstance(bad_type.value, TypeError) and isinstance(bad_type.value, NpufuseError)


def test_a_call_is_bound_once_into_one_record_with_the_wrappers_names_and_defaults() -> None:
    from dataclasses import FrozenInstanceError

    from pytest_npufuse.torch_npu.registry import bind

    x, gamma = torch.ones(2, 4), torch.ones(4)
    positional, by_keyword = bind(torch_npu.npu_rms_norm, x, gamma), bind(torch_npu.npu_rms_norm, gamma=gamma, input=x)
    for call in (positional, by_keyword):
        assert call.input is x and call.gamma is gamma and call.epsilon == 1e-6
    keyword_only = bind(torch_npu.npu_fused_infer_attention_score, x, x, x, num_heads=2)
    assert keyword_only.num_heads == 2 and keyword_only.input_layout == "BSH" and keyword_only.atten_mask is None
    with pytest.raises(FrozenInstanceError):
        positional.epsilon = 1e-5
