"""Every registered torch_npu op of the shim through ``torch.library.opcheck``: its schema (no undeclared
mutation or aliasing), its fake kernel against its CPU kernel (shapes, dtypes, strides), its autograd
registration and AOTAutograd's dispatch of it (forward and, for a differentiable op, backward).

The ops come from the registry, each with the sample calls declared with it (``npu_op(samples=...)``), so
a new op is checked the moment it is declared, and one declared without samples fails here.
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

from pytest_npufuse import torch_npu  # noqa: F401  (declares every op)
from pytest_npufuse.torch_npu.registry import NAMESPACE, OPS, NpuOp, SampleCall


def _registered() -> list[tuple[NpuOp, str]]:
    """Each declared op with each op it registers: the op itself and, for an op torch_npu declares as
    mutating, the functional op a traced graph holds."""
    return [(op, name) for op in OPS.values() for name in dict.fromkeys((op.graph_name or op.name, op.name))]


def _requiring_grad(op: NpuOp, sample: SampleCall) -> SampleCall:
    """The sample with its floating-point tensors requiring grad where the op is differentiable, so opcheck
    checks the autograd registration and AOTAutograd's backward; other ops get no grad-requiring input
    (torch_npu registers no derivative for them)."""
    if not op.differentiable:
        return sample

    def leaf(value: torch.Tensor) -> torch.Tensor:
        return value.detach().requires_grad_(value.is_floating_point())

    args, kwargs = pytree.tree_map_only(torch.Tensor, leaf, (sample.args, dict(sample.kwargs)))
    return SampleCall(args, kwargs)


# float8 formats torch's CPU cannot compare with allclose, which opcheck's schema check uses on every input
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu)
ALL_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _tensors(call: SampleCall) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves((call.args, dict(call.kwargs))) if isinstance(t, torch.Tensor)]


def _require_unchanged_and_unaliased(overload: torch._ops.OpOverload, call: SampleCall) -> None:
    """opcheck's schema check for a call with float8 inputs (torch's ``allclose`` has no float8 kernel):
    the op leaves every input's bytes as they were and returns no view of an input."""
    inputs = _tensors(call)
    before = [t.clone() for t in inputs]
    outputs = [t for t in pytree.tree_leaves(overload(*call.args, **dict(call.kwargs))) if isinstance(t, torch.Tensor)]
    for old, new in zip(before, inputs):
        assert torch.equal(old.view(torch.uint8), new.view(torch.uint8)), "the op changed an input it does not mutate"
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    assert not any(out.untyped_storage().data_ptr() in storages for out in outputs), "an output aliases an input"


@pytest.mark.parametrize(("op", "registered"), _registered(), ids=lambda value: value if isinstance(value, str) else "")
def test_opcheck(op: NpuOp, registered: str) -> None:
    assert op.samples is not None, f"declare {op.name} with samples=... (registry.SampleCall) so it is checked"
    calls = op.samples()
    assert calls, f"{op.name}'s samples are empty"
    overload = getattr(getattr(torch.ops, NAMESPACE), registered).default
    for sample in calls:
        call = _requiring_grad(op, sample)
        checks = ALL_CHECKS
        if any(t.dtype in FLOAT8 for t in _tensors(call)):
            _require_unchanged_and_unaliased(overload, call)
            checks = ALL_CHECKS[1:]
        torch.library.opcheck(overload, call.args, dict(call.kwargs), test_utils=checks)


def test_differentiable_samples_exercise_the_backward() -> None:
    """opcheck skips the autograd checks of a call with no grad-requiring input: each differentiable op's
    samples must give it one."""
    for op in OPS.values():
        if op.differentiable and op.samples is not None:
            for sample in op.samples():
                call = _requiring_grad(op, sample)
                assert any(t.requires_grad for t in pytree.tree_leaves((call.args, dict(call.kwargs)))
                           if isinstance(t, torch.Tensor)), op.name
