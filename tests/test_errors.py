"""Errors carry data: the kind (one per class), the op, the argument, the user's line, the file and the place
in it; the message is rendered from those fields in one place, and the fields survive Dynamo and pickling.

These are the message-format tests: the rest of the suite asserts on the fields, not on the wording."""

from __future__ import annotations

import inspect
import pickle

import pytest
import torch

import pytest_npufuse.errors as errors
from pytest_npufuse.errors import ArgumentError, NpufuseError, OpArgumentError, OpTypeError, ProfileError
from pytest_npufuse import torch_npu
from pytest_npufuse.vocabulary import ErrorKind

ERROR_CLASSES = [
    cls for _, cls in inspect.getmembers(errors, inspect.isclass) if issubclass(cls, NpufuseError)
]


def test_each_error_class_has_a_kind_of_its_own():
    kinds = [cls.kind for cls in ERROR_CLASSES]
    assert all(isinstance(kind, ErrorKind) for kind in kinds)
    assert len(set(kinds)) == len(ERROR_CLASSES)
    assert set(kinds) == set(ErrorKind)


def test_the_message_names_the_op_and_the_users_line_unless_the_problem_already_does():
    error = OpArgumentError("k=0 must be between 1 and 8", op="npu_moe_gating_top_k", argument="k", where="m.py:3")
    assert error.diagnosis == "npu_moe_gating_top_k: k=0 must be between 1 and 8 (at m.py:3)."
    assert error.problem == "k=0 must be between 1 and 8"
    named = ArgumentError("HostConfig(threads=0): threads is at least 1.", op="HostConfig", where="m.py:3")
    assert str(named) == "HostConfig(threads=0): threads is at least 1 (at m.py:3)."
    assert str(ProfileError("bad.toml: not valid TOML.", file="bad.toml")) == "bad.toml: not valid TOML."


def test_fields_survive_pickling():
    error = OpTypeError("out_flag must be a bool, got int 1", op="npu_moe_gating_top_k", argument="out_flag")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.op, copy.argument, copy.kind, str(copy)) == (error.op, error.argument, error.kind, str(error))


def test_an_eager_op_check_names_the_op_the_argument_and_the_callers_line():
    with pytest.raises(OpArgumentError) as exc:
        torch_npu.npu_moe_gating_top_k(torch.randn(4, 8), 0)
    line = inspect.currentframe().f_lineno - 1
    assert (exc.value.op, exc.value.argument) == ("npu_moe_gating_top_k", "k")
    assert exc.value.where == f"{__file__}:{line}"
    assert exc.value.diagnosis.startswith("npu_moe_gating_top_k: k=0 must be")
    assert exc.value.diagnosis.endswith(f"(at {__file__}:{line}).")


def test_an_op_argument_error_reads_as_torch_npus_own_text_and_keeps_its_fields():
    """torch_npu's argument checks raise a plain RuntimeError text, which upstream tests compare exactly
    (TestNpuPrefetch in Ascend/pytorch test/test_fake_tensor.py); the op and the line stay in the fields."""
    with pytest.raises(RuntimeError) as exc:
        torch_npu.npu_prefetch(torch.randn(8, 8), None, 10, -1)
    assert (exc.value.op, exc.value.argument) == ("npu_prefetch", "offset")
    assert str(exc.value) == "offset should not be smaller than zero, but got -1"
    assert exc.value.diagnosis.startswith("npu_prefetch: offset should not be smaller than zero")


def test_an_op_check_raising_while_dynamo_traces_keeps_its_fields():
    """A type check runs in the traced public callable; a value check in the fake kernel. Without fullgraph
    Dynamo falls back to running the frame, which raises the error itself; with it, the error Dynamo
    reports chains to ours (the fake kernel's) or quotes it (the traced one's)."""
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with pytest.raises(OpTypeError) as exc:
        torch.compile(lambda t: torch_npu.npu_moe_gating_top_k(t, 2, out_flag=1), backend="eager")(x)
    assert (exc.value.op, exc.value.argument, exc.value.kind) == ("npu_moe_gating_top_k", "out_flag", ErrorKind.OP_TYPE)
    torch._dynamo.reset()
    with pytest.raises(Exception) as traced:
        torch.compile(lambda t: torch_npu.npu_moe_gating_top_k(t, 0), backend="eager", fullgraph=True)(x)
    chain, current = [], traced.value
    while current is not None:
        chain.append(current)
        current = current.__cause__ or current.__context__
    ours = [error for error in chain if isinstance(error, NpufuseError)]
    assert [(error.op, error.argument) for error in ours] == [("npu_moe_gating_top_k", "k")]
