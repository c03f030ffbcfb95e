"""The modeled process's state lives in sessions (:mod:`pytest_npufuse.session`), never in a module global:
no ``global`` statement, and no module-level container a function changes, except the declarations below,
which are made once at import (or belong to the real process, not the modeled one)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_npufuse

PACKAGE = Path(pytest_npufuse.__file__).resolve().parent
MUTATORS = {
    "append", "extend", "add", "update", "clear", "pop", "popitem", "remove", "discard", "insert", "setdefault",
    "appendleft", "sort", "reverse",
}
NOT_SESSION_STATE = {
    ("torch_npu/distributed.py", "_DOMAINS"): "the hccl groups the real process joined, as torch.distributed's own registry",
    ("shim/devices.py", "SELECTED"): "the NPU the real process computes as (torch.npu.set_device), one per process",
    ("session.py", "_OPEN"): "the stack of open sessions itself",
    ("session.py", "_DECLARED"): "the session keys, declared at import",
    ("cost/registry.py", "_RULES"): "cost rules, declared at import",
    ("cost/semantics.py", "_BY_OP"): "ops' documented work formulas, declared at import",
    ("torch_npu/registry.py", "_OPS"): "torch_npu ops, declared at import",
    ("torch_npu/registry.py", "_BINDERS"): "torch_npu ops, declared at import",
    ("torch_npu/registry.py", "_VALIDATORS"): "torch_npu ops, declared at import",
    ("torchair/_fxpass.py", "_LIBRARIES"): "marker op libraries, declared at import",
    ("torchair/_reinplace.py", "inplaceable_npu_ops"): "TorchAir's registry, filled at import",
    ("frontend/rewrites.py", "_RULES"): "rewrite rules, registered at import as TorchAir's",
    ("torch_npu/formats.py", "_RECORDED"): "data of each storage, living as long as the storage",
    ("files/lock.py", "_HELD"): "the real process's file locks",
    ("plugin.py", "_LOAD_NOTES"): "pytest's plugin loading, before any config exists",
}


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node


def _changed_by_functions(tree: ast.Module) -> set[str]:
    """Module-level names a function changes in place (calls a mutating method of, or assigns into)."""
    names = _module_names(tree)
    changed = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        local = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
        for node in ast.walk(function):
            roots = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                roots.append(_root(node.func.value))
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                roots += [_root(target) for target in targets if isinstance(target, (ast.Subscript, ast.Attribute))]
            changed.update(root.id for root in roots if isinstance(root, ast.Name) and root.id in names - local)
    return changed


def _sources() -> dict[str, ast.Module]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_global_statements():
    found = [f"{name}:{node.lineno}" for name, tree in _sources().items() for node in ast.walk(tree)
             if isinstance(node, ast.Global)]
    assert not found, f"module globals rebound at run time; keep the state in a session (SessionKey): {found}"


def test_no_module_level_state_outside_a_session():
    found = sorted(f"{name}: {changed}" for name, tree in _sources().items() for changed in _changed_by_functions(tree)
                   if (name, changed) not in NOT_SESSION_STATE)
    assert not found, (
        "module-level state changed at run time; declare it as a SessionKey in its module (pytest_npufuse.session), "
        f"or, if it is a declaration made once at import, list it here with why: {found}"
    )
