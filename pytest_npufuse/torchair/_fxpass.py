"""A config's own FX passes (``post_grad_custom_pre_pass`` / ``post_grad_custom_post_pass``) and the
marker ops they insert.

TorchAir and npugraph_ex run a user's pass ``fn(gm, example_inputs, config)`` on each aten graph after
AOTAutograd, before (pre) and after (post) their built-in FX passes; the pass edits ``gm`` in place and
its return value is ignored (Ascend/torchair docs/zh/ascend_ir/features/basic/post_grad_custom_pass.md,
docs/zh/npugraph_ex/advanced/post_grad_custom_pass.md, commit fced8842). The documented use is placing
ops on streams from a pass: it inserts ``scope_enter(["_user_stream_label"], [name])`` / ``scope_exit()``
around ops and orders them across streams with ``record()`` / ``wait([record])``, from the ``air``
namespace (TorchAir) or the ``npugraph_ex`` namespace (npugraph_ex). Those ops are defined here with
TorchAir's schemas, and after the user's passes each is replaced by the model's own marker
(:mod:`pytest_npufuse.frontend.scopes`, :mod:`pytest_npufuse.frontend.syncs`), so a pass's streams and
events are planned, sanitized and priced like the scopes' own. The model has no built-in FX passes to
run between the two but the user's registered pattern replacements (:mod:`.patterns.pattern_pass_manager`)
and TorchAir's reinplacing in the aclgraph modes (:mod:`._reinplace`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.fx.node import has_side_effect

from ..frontend.scopes import SCOPE_ENTER, SCOPE_EXIT
from ..frontend.syncs import RECORD, WAIT

__all__ = ["run_passes"]

UserPass = Callable[[torch.fx.GraphModule, Sequence[Any], Any], object]

_SCHEMAS = {
    "scope_enter": "scope_enter(str[] keys, str[] values, bool need_execute=False) -> ()",
    "scope_exit": "scope_exit() -> ()",
    "record": "record(*, Device? device=None) -> Tensor",
    "wait": "wait(Tensor[] x) -> ()",
}


def _inert(*args: object, **kwargs: object) -> None:
    """A marker does nothing when run: it only tells the backend how to place the ops around it."""


def _token(*, device: Any = None) -> torch.Tensor:
    """What ``record()`` returns: an empty tensor ``wait`` names."""
    return torch.empty(0, device=device)


def _define(namespace: str) -> None:
    """The four marker ops in ``namespace``, unless something (a real TorchAir) defined them already."""
    library = torch.library.Library(namespace, "FRAGMENT")
    _LIBRARIES.append(library)
    for name, schema in _SCHEMAS.items():
        if hasattr(getattr(torch.ops, namespace), name):
            continue
        library.define(schema)
        kernel = _token if name == "record" else _inert
        library.impl(name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", kernel, lib=library)
        if name != "record":
            has_side_effect(getattr(getattr(torch.ops, namespace), name).default)


# The marker ops' libraries, kept alive (declarations made once at import, not session state).
_LIBRARIES: list[torch.library.Library] = []
for _namespace in ("air", "npugraph_ex"):
    _define(_namespace)

# Each user-facing marker and the model's own op it becomes, with the arguments the model's op takes.
_MARKERS: dict[Any, tuple[Any, Callable[..., tuple[Any, ...]]]] = {}
for _namespace in ("air", "npugraph_ex"):
    _ops = getattr(torch.ops, _namespace)
    _MARKERS[_ops.scope_enter.default] = (SCOPE_ENTER, lambda keys, values, need_execute=False: (keys, values))
    _MARKERS[_ops.scope_exit.default] = (SCOPE_EXIT, lambda: ())
    _MARKERS[_ops.record.default] = (RECORD, lambda device=None: ())
    _MARKERS[_ops.wait.default] = (WAIT, lambda x: (x,))


def _no_stage(stage: str) -> None:
    """Nothing watches the passes."""


def run_passes(
    pre: UserPass | None,
    post: UserPass | None,
    config: Any,
    builtins: Sequence[tuple[str, Callable[[torch.fx.GraphModule], None]]],
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    reached: Callable[[str], None] = _no_stage,
) -> None:
    """The config's pre pass, the model's built-in passes in order (``builtins``: each with the TorchAir
    pass it stands for, or ``""``: the user's registered pattern replacements,
    :mod:`pytest_npufuse.torchair.patterns.pattern_pass_manager`, and TorchAir's reinplacing in the
    aclgraph modes, :mod:`pytest_npufuse.torchair._reinplace`), then the config's post pass, on ``gm``
    (each user pass handed ``config``, as TorchAir hands its ``CompilerConfig``); the marker ops they (or
    the model's code) put in the graph become the model's own. ``reached(pass)`` is told each TorchAir
    pass done (TorchAir's debug files, :mod:`pytest_npufuse.torchair._debugdump`)."""
    if pre is not None:
        pre(gm, example_inputs, config)
        reached("post_grad_custom_pre_pass")
    _lower_markers(gm)
    for stage, builtin in builtins:
        builtin(gm)
        if stage:
            reached(stage)
    if post is not None:
        post(gm, example_inputs, config)
    _lower_markers(gm)
    gm.graph.lint()
    gm.recompile()
    if post is not None:
        reached("post_grad_custom_post_pass")


def _lower_markers(gm: torch.fx.GraphModule) -> None:
    """Replace each ``air::`` / ``npugraph_ex::`` marker node by the model's op, in place (a ``record``
    keeps its users: the ``wait`` nodes that name it)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _MARKERS:
            continue
        target, arguments = _MARKERS[node.target]
        node.args = arguments(*node.args, **node.kwargs)
        node.kwargs = {}
        node.target = target
