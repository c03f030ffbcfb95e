"""The shim's torch_npu against the real package's public names: zero difference on the names torch_npu's
op tests use, except the tracked gaps.

``torch_npu_api.toml`` beside this file is written by ``benchmarks/torch_npu_api.py`` from the sources of
the torch_npu version the shim models (Ascend/pytorch and the op-plugin commit it pins): every op's schema,
the dtype names, the ``__all__`` of the Python packages the shim models, the contrib classes' constructors,
the names the peer-suite test files and vLLM-Ascend's code use, and ``[gaps]``: the used names the shim lacks or declares with
another schema, each with why. A gap closed by a change to the shim fails
:func:`test_every_tracked_gap_is_still_a_gap` until its line is removed (rerun the script), so the list
never claims less than the shim does; a new difference fails :func:`test_used_names_match_the_real_package`.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import tomllib
from pathlib import Path
from typing import Optional

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.shim import EXACT, ROOTS
from pytest_npufuse.torch_npu.contrib import module as contrib_module
from pytest_npufuse.torch_npu.dtypes import DTYPE_CODES
from pytest_npufuse.torch_npu.schema import declarations

API = tomllib.loads((Path(__file__).parent / "torch_npu_api.toml").read_text())
USED = sorted(set(API["used"]["tests"]) | set(API["used"]["public_code"]))
_ALIAS = re.compile(r"\([a-z]!?\)")
# torch_npu's code generator registers each op-plugin schema with ``self`` renamed ``input``
# (Ascend/pytorch torchnpugen/custom_functions.py), so the registered schema, which the shim models, says
# ``input`` where op-plugin's yaml, recorded in torch_npu_api.toml, says ``self``.
_SELF = re.compile(r"\bself\b(?=[,)])")


def _arguments(schema: str) -> dict[str, str]:
    """Each argument of ``schema`` as ``[*]type name[=default]``, ``*`` marking a keyword-only one."""
    parsed = torch._C.parse_schema(f"npu::{_ALIAS.sub('', schema)}")
    return {
        a.name: ("*" if a.kwarg_only else "") + f"{a.type} {a.name}"
        + (f"={a.default_value!r}" if a.has_default_value() else "")
        for a in parsed.arguments
    }


def compare_op(name: str, real_schema: str) -> Optional[str]:
    """None when the shim declares ``name`` with the real schema (aliasing marks aside: the shim's op is
    functional and writes back), else what differs."""
    declared = declarations().get(name)
    if declared is None:
        return "a Python helper in the shim, not a torch.ops.npu op" if shim_has(name) else "missing"
    real_schema = _SELF.sub("input", real_schema)
    real = torch._C.parse_schema(f"npu::{_ALIAS.sub('', real_schema)}")
    mine = torch._C.parse_schema(f"npu::{declared.schema}")
    if str(real) == str(mine):
        return None
    theirs, ours = _arguments(real_schema), _arguments(declared.schema)
    notes = [f"lacks {', '.join(n for n in theirs if n not in ours)}"] if set(theirs) - set(ours) else []
    notes += [f"adds {', '.join(n for n in ours if n not in theirs)}"] if set(ours) - set(theirs) else []
    notes += [f"{n}: {ours[n]} (real: {theirs[n]})" for n in theirs if n in ours and ours[n] != theirs[n]]
    if [n for n in theirs if n in ours] != [n for n in ours if n in theirs]:
        notes.append("argument order")
    if str(real.returns) != str(mine.returns) and not notes:
        notes.append(f"returns {[str(r.type) for r in mine.returns]} (real: {[str(r.type) for r in real.returns]})")
    return "schema differs: " + "; ".join(notes or ["keyword-only markers"])


def shim_has(name: str) -> bool:
    """Whether ``torch_npu.<name>`` resolves under the shim: an attribute, or a submodule it maps
    (``torch_npu.npu`` is the shim's torch.npu, ``torch_npu.onnx`` this package's ``onnx``)."""
    try:
        getattr(torch_npu, name)
        return True
    except AttributeError:  # MissingOpError is one
        pass
    target = EXACT.get(f"torch_npu.{name}", f"{ROOTS['torch_npu']}.{name}")
    # found, not imported: importing torch_npu.onnx would re-bind ops for every later test
    return importlib.util.find_spec(target) is not None


def _difference(name: str) -> Optional[str]:
    if name in API["ops"]:
        return compare_op(name, API["ops"][name])
    return None if shim_has(name) else "missing"


@pytest.mark.parametrize("name", [n for n in USED if n not in API["gaps"]])
def test_used_names_match_the_real_package(name: str) -> None:
    assert _difference(name) is None, f"torch_npu.{name}: {_difference(name)}; fix the shim or rerun the script"


@pytest.mark.parametrize("name", [n for n in API["gaps"] if not n.startswith("contrib.")])
def test_every_tracked_gap_is_still_a_gap(name: str) -> None:
    assert _difference(name) is not None, f"torch_npu.{name} now matches: remove it from [gaps] (rerun the script)"


def test_every_declared_op_is_a_real_op_with_its_schema_or_a_tracked_gap() -> None:
    unknown = sorted(set(declarations()) - set(API["ops"]))
    assert unknown == [], f"ops the real torch_npu does not have: {unknown}"
    differing = {n: compare_op(n, API["ops"][n]) for n in declarations() if n not in API["gaps"]}
    assert {n: why for n, why in differing.items() if why} == {}


def test_dtype_names_are_torch_npus() -> None:
    assert sorted(DTYPE_CODES) == sorted(API["dtypes"]["names"])
    assert all(getattr(torch_npu, name) == code for name, code in DTYPE_CODES.items())


def constructor_text(cls: type) -> str:
    """``cls.__init__``'s parameters as the script writes torch_npu's: ``(self, a, *, b=True)``."""
    parts, star = [], False
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(p.name + ("" if p.default is p.empty else f"={p.default!r}"))
    return f"({', '.join(parts)})"


@pytest.mark.parametrize("cls", sorted(API["contrib"]))
def test_contrib_classes_take_torch_npus_constructor_arguments(cls: str) -> None:
    assert constructor_text(getattr(contrib_module, cls)) == API["contrib"][cls]
    assert cls in API["modules"]["torch_npu.contrib.module"]
