"""TorchAir's reinplacing of registered functional NPU ops in the aclgraph modes, and its registry.

An op that updates some of its arguments (``torch_npu.npu_mla_prolog_v3`` writes ``kv_cache`` and
``kr_cache``) reaches an aten graph in its functional form (``npu_mla_prolog_v3_functional``, the updated
arguments as extra outputs), and a graph input it updates gets a ``copy_`` of that output back into it
at the end of the graph. In the aclgraph modes (``reduce-overhead``, npugraph_ex) TorchAir's pass over
mutated inputs (``_reinplace_input_mutated_ops``, off with
``debug.aclgraph.disable_reinplace_input_mutated_ops_pass``) turns such a node back into the in-place op
when it is registered in ``inplaceable_npu_ops`` (functional op -> its
in-place op and the positions of the arguments it updates): the ``copy_`` epilogues disappear, so the
device no longer copies each updated input whole, which the model then no longer prices. TorchAir
registers its own three such ops and user code registers its custom ops there directly (hicann
cann-recipes-infer's mla_prolog registration writes ``inplaceable_npu_ops[functional] =
InplaceableNpuOp(inplace_op=..., mutated_arg=[7, 8], extra_check=check_multi_stream_for_multi_reinplace)``).
TorchAir facts: Ascend/torchair python/torchair/_acl_concrete_graph/graph_pass.py and utils.py
(``ReinplaceStreamChecker``), python/torchair/_utils/graph_utils.py, commit fced8842.

A node is reinplaced when every updated argument is a graph input written back by a ``copy_`` of the
node's matching output, no later op reads the input's old value, and the entry's ``extra_check``
passes; TorchAir's check (:func:`check_multi_stream_for_multi_reinplace`) refuses when the users of an
updated input run on more than one stream, and logs its verdict at DEBUG in TorchAir's words. The
reinplaced node keeps the device kernel of its functional form (:data:`~pytest_npufuse.frontend.reinplace.PRICED_AS`),
and writes the inputs in place, where the sanitizer sees the writes. TorchAir's other reinplacing
(functional aten ops and registered ops on intermediate tensors, through torch's reinplace pass) is
not modeled: those ops run functionally, as in the other modes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from ..frontend.lower import op_type_of
from ..frontend.reinplace import KEEP_WRITE_BACKS, PRICED_AS
from ..frontend.scopes import STREAM_LABEL_META, label_streams
from .core.utils import logger

__all__ = [
    "InplaceableNpuOp",
    "inplaceable_npu_ops",
    "register_inplaceable_npu_op",
    "check_multi_stream_for_single_reinplace",
    "check_multi_stream_for_multi_reinplace",
]


@dataclass(frozen=True)
class InplaceableNpuOp:
    """The in-place op a registered functional op becomes, the argument positions it updates (their new
    values are the functional op's last outputs, in this order), and a check that may refuse a node."""

    inplace_op: Callable[..., Any]
    mutated_arg: list[int]
    extra_check: Callable[[torch.fx.Node], bool] = lambda node: True


# TorchAir's own registry, which a CANN ops package (and user code) fills at import: declarations, as the op
# registry's, not session state.
inplaceable_npu_ops: dict[Callable[..., Any], InplaceableNpuOp] = {}


def _is_copy(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.aten.copy_.default


def _output_of(node: torch.fx.Node, index: int) -> torch.fx.Node | None:
    """The ``getitem(node, index)`` node, if the graph has one."""
    return next((u for u in node.users if u.target is operator.getitem and u.args[1] == index), None)


def _mutated_input_users(node: torch.fx.Node, index: int, mutated: Sequence[int]) -> list[torch.fx.Node]:
    """Every node that reads the argument at ``index`` or its new value (TorchAir's user collection):
    the argument's users but its ``copy_`` epilogue, the users of what that ``copy_`` writes (the op's
    output, or torch_npu's functional ``copy`` of it) and of the ``copy_`` itself, and the users of the
    functional op's output for the argument."""
    argument = node.args[index]
    users = [u for u in argument.users if not _is_copy(u)]
    copy = next((u for u in argument.users if _is_copy(u)), None)
    if copy is not None:
        users += [u for u in copy.args[1].users if u is not copy] + list(copy.users)
    output = _output_of(node, len(pytree.tree_leaves(node.meta.get("val"))) - len(mutated) + list(mutated).index(index))
    return users + (list(output.users) if output is not None else [])


def _registered(node: torch.fx.Node) -> InplaceableNpuOp | None:
    return inplaceable_npu_ops.get(node.target)


def _users_on_one_stream(node: torch.fx.Node, indices: Sequence[int]) -> bool:
    check = "multi_stream_single_reinplace" if len(indices) == 1 else "multi_stream_multi_reinplace"
    for index in indices:
        users = _mutated_input_users(node, index, indices)
        streams = {u.meta.get(STREAM_LABEL_META, "?") for u in users}
        if len(users) < 2 or len(streams) == 1:
            logger.debug(
                "[%s]Current node: %s, type: %s check no multi stream users success for reinplace. "
                "The users of the mutated input node did not have multiple streams.", check, node.name, node.target,
            )
            continue
        logger.debug(
            "[%s]Current node: %s, type: %s check no multi stream users failed for reinplace. "
            "The users of the mutated input node have multiple streams. All the users are %s.",
            check, node.name, node.target, users,
        )
        return False
    return True


def check_multi_stream_for_single_reinplace(node: torch.fx.Node) -> bool:
    """True when the users of the node's first argument (the one an in-place op updates) run on one stream."""
    return _users_on_one_stream(node, [0])


def check_multi_stream_for_multi_reinplace(node: torch.fx.Node) -> bool:
    """True when, for each argument the node's registered in-place op updates, its users run on one
    stream; False for an op not registered in :data:`inplaceable_npu_ops`."""
    entry = _registered(node)
    return entry is not None and _users_on_one_stream(node, entry.mutated_arg)


def register_inplaceable_npu_op(
    functional_op_name: str,
    inplace_op_name: str,
    mutated_arg: list[int],
    extra_check: Callable[[torch.fx.Node], bool] = check_multi_stream_for_multi_reinplace,
) -> None:
    """Register ``torch.ops.npu.<functional_op_name>`` as reinplaceable into ``torch.ops.npu.<inplace_op_name>``
    (TorchAir's helper: an op torch_npu does not define is skipped)."""
    functional = getattr(torch.ops.npu, functional_op_name, None)
    inplace = getattr(torch.ops.npu, inplace_op_name, None)
    if functional is None or inplace is None:
        return
    inplaceable_npu_ops[functional.default] = InplaceableNpuOp(inplace.default, list(mutated_arg), extra_check)


def _write_back(output: torch.fx.Node, argument: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes that write ``output`` back into ``argument``, last first: the ``copy_`` epilogue, and the
    functional ``copy`` before it when the op wrote the argument itself (torch_npu's Python write-back
    of an in-place op functionalizes to ``copy_(arg, copy(arg, out))``; later reads of the argument
    read that ``copy``)."""
    for user in output.users:
        if _is_copy(user) and user.args[0] is argument:
            return [user]
        if user.target is torch.ops.aten.copy.default and user.args[0] is argument:
            last = next((u for u in user.users if _is_copy(u) and u.args[0] is argument), None)
            if last is not None:
                return [last, user]
    return None


def _epilogues(node: torch.fx.Node, entry: InplaceableNpuOp) -> list[tuple[torch.fx.Node, list[torch.fx.Node]]] | None:
    """For each updated argument, the argument and the nodes reinplacing removes (its write-back, then
    the node's output for it), or None unless each is a graph input that its output is written back into."""
    outputs = len(pytree.tree_leaves(node.meta.get("val")))
    found = []
    for k, index in enumerate(entry.mutated_arg):
        argument = node.args[index] if 0 <= index < len(node.args) else None
        if not isinstance(argument, torch.fx.Node) or argument.op != "placeholder":
            return None
        output = _output_of(node, outputs - len(entry.mutated_arg) + k)
        chain = _write_back(output, argument) if output is not None else None
        if chain is None:
            return None
        found.append((argument, [*chain, output]))
    return found if len({argument for argument, _ in found}) == len(found) else None


def _reads_old_value_later(node: torch.fx.Node, epilogues: Sequence[tuple[torch.fx.Node, list[torch.fx.Node]]]) -> bool:
    """Whether an op after ``node`` reads an updated input before its write-back (it would see the new value)."""
    position = {n: i for i, n in enumerate(node.graph.nodes)}
    return any(
        position[user] > position[node]
        for argument, removed in epilogues
        for user in argument.users
        if user is not node and user not in removed
    )


def keep_write_backs(gm: torch.fx.GraphModule) -> None:
    """The aclgraph modes with TorchAir's mutated-input pass switched off: the device copies each updated
    input back, so neither a registered op nor a functionalised aten write runs in place."""
    gm.meta[KEEP_WRITE_BACKS] = True


def reinplace_inplaceable_ops(gm: torch.fx.GraphModule, registry: Mapping[Any, InplaceableNpuOp] = inplaceable_npu_ops) -> None:
    """Turn each registered functional node whose updated arguments are written back into graph inputs
    into its in-place op, dropping the ``copy_`` epilogues (in place on ``gm``)."""
    label_streams(gm)
    for node in list(gm.graph.nodes):
        entry = registry.get(node.target) if node.op == "call_function" else None
        if entry is None:
            continue
        epilogues = _epilogues(node, entry)
        if epilogues is None:
            logger.debug("reinplace failed, all mutated args(get_item) must have copy epilogues: %s", node.target)
            continue
        if _reads_old_value_later(node, epilogues) or not entry.extra_check(node):
            logger.debug("can_inplace return False, will skip reinplacing for node: %s", node.target)
            continue
        for argument, removed in epilogues:
            for replaced in removed:
                replaced.replace_all_uses_with(argument)
                gm.graph.erase_node(replaced)
        node.meta[PRICED_AS] = op_type_of(node)
        node.target = entry.inplace_op
    gm.graph.lint()
    gm.recompile()


register_inplaceable_npu_op("npu_kv_rmsnorm_rope_cache_v2_functional", "npu_kv_rmsnorm_rope_cache_v2", mutated_arg=[5, 6])
register_inplaceable_npu_op("npu_mla_prolog_v3_functional", "npu_mla_prolog_v3", mutated_arg=[9, 10])
register_inplaceable_npu_op("npu_add_rms_norm_v2_functional", "npu_add_rms_norm_v2", mutated_arg=[0, 1])
