"""Where in the user's code an op came from: the line, the module path, the call.

Every message and report names the user's source line; frames of this package, of torch's own Python
wrappers and of contextlib are never the user's."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ..errors import PACKAGE_DIR

# Frames in these places are never the user's code: ours, torch's own Python wrappers (a functional
# collective or F.* helper would otherwise be named as the source of the op it calls), and contextlib
# around a ``with`` block.
_NOT_USER = (
    str(PACKAGE_DIR),
    str(Path(torch.__file__).parent),
    str(Path(contextlib.__file__).parent / "contextlib.py"),
)


def is_user_path(path: str) -> bool:
    """Whether a frame in ``path`` is the user's code (not this package, torch or contextlib)."""
    return not path.startswith(_NOT_USER)


def user_frame(trace: str) -> str:
    """The innermost frame of a formatted traceback outside this package, torch and the standard
    library, as ``path:line`` ('' when there is none): messages point at the user's model code."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    user = [(path, line) for path, line in frames if not path.startswith(_NOT_USER)]
    return f"{user[-1][0]}:{user[-1][1]}" if user else ""


def _forward_lines(owner: Any) -> tuple[str, int, int] | None:
    """File and first/last line of a module class's ``forward``, or None when it has no Python source."""
    code = getattr(getattr(owner, "forward", None), "__code__", None)
    if code is None:
        return None
    lines = [line for _, _, line in code.co_lines() if line is not None]
    return code.co_filename, min(lines, default=code.co_firstlineno), max(lines, default=code.co_firstlineno)


def call_site(trace: str, owner: Any) -> str:
    """The user's line (``path:line``) that called a module of class ``owner``: the last frame outside
    this package before the first frame inside the class's ``forward`` in a node's stack trace."""
    span = _forward_lines(owner)
    if span is None:
        return ""
    filename, first, last = span
    caller = ""
    for path, line in re.findall(r'File "([^"]+)", line (\d+)', trace):
        if path == filename and first <= int(line) <= last:
            return caller
        if not path.startswith(_NOT_USER):
            caller = f"{path}:{line}"
    return ""


def source_line(node: torch.fx.Node) -> str:
    """The user's source location of a node."""
    return user_frame(node.meta.get("stack_trace") or "")


_ROOT = re.compile(r"^L\[['\"][^'\"]*['\"]\]\.?")


_GETATTR = re.compile(r"getattr\(([^()]*?), ['\"]([^'\"]+)['\"]\)")


_SUBSCRIPT = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")


_MODULES = re.compile(r"(^|\.)_modules\.")


def module_path(key: str) -> str:
    """The attribute path of a module from the key Dynamo records it under: ``L['self'].layers.0.attn``,
    ``getattr(L['self'].layers, '0')`` and ``L['self'].layers[0]`` all become ``layers.0[.attn]``."""
    while (match := _GETATTR.search(key)) is not None:
        key = f"{key[:match.start()]}{match.group(1)}.{match.group(2)}{key[match.end():]}"
    key = _ROOT.sub("", key)
    return _MODULES.sub(r"\1", _SUBSCRIPT.sub(r".\1", key)).lstrip(".")


def call_name(node: torch.fx.Node) -> str:
    """The torch-level call Dynamo lowered ``node`` from (its ``source_fn_stack``; a backward node
    carries its forward op's as ``fwd_source_fn_stack``): a function's or a module class's name, or the
    method name; ``""`` when not recorded."""
    stack = node.meta.get("source_fn_stack") or node.meta.get("fwd_source_fn_stack") or ()
    if not stack:
        return ""
    target = stack[-1][1]
    return target if isinstance(target, str) else getattr(target, "__name__", "")
