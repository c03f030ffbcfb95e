"""The shape of a model as the scope advisor sees it: its decoder layers and what each layer holds.

Everything comes from the ``nn.Module`` calls Dynamo recorded on the captured kernels (``Kernel.modules``),
so the model's source is never edited or even read. A *layer* is a numbered child of a container
(``layers.0``, ``layers.1``, ... of a ``ModuleList``); when a model has several such containers, the one
holding the most kernels is the decoder stack. A layer's direct children get a role, by name first
(``self_attn``, ``mlp``, ``moe``, as the public LLaMA / DeepSeek / Qwen code names them) and by the ops
inside when the name says nothing. The model family then follows the decision tree of
docs/feature-docs.md#scope-analysis: a layer with an MoE block makes a MoE model, attention plus a dense FFN a standard
Transformer, anything else other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..ir.program import Kernel, ModuleFrame, Program


class Role(str, enum.Enum):
    """What a direct child of a decoder layer does; the value is the scope label the advisor uses."""

    ATTENTION = "attention"
    MOE = "moe"
    FFN = "ffn"


class Family(str, enum.Enum):
    """The model types of the scope decision tree of docs/feature-docs.md#scope-analysis."""

    MOE = "MoE model"
    STANDARD = "standard Transformer"
    OTHER = "other model"


_NAME_HINTS: tuple[tuple[Role, tuple[str, ...]], ...] = (
    (Role.MOE, ("moe", "expert")),
    (Role.ATTENTION, ("attn", "attention")),
    (Role.FFN, ("mlp", "ffn", "feed_forward", "feedforward")),
)
# Op types that give a block away when its name does not (namespace::name, matched by substring).
_OP_HINTS: tuple[tuple[Role, tuple[str, ...]], ...] = (
    (Role.MOE, ("moe_gating", "grouped_matmul", "moe_init_routing", "moe_distribute")),
    (Role.ATTENTION, ("attention", "softmax", "flash")),
)


@dataclass(frozen=True)
class Block:
    """One direct child of a layer with a role, and the kernels traced inside it (program order)."""

    frame: ModuleFrame
    role: Role
    kernels: tuple[str, ...]


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its frame, all its kernels in program order, and its role blocks."""

    index: int
    frame: ModuleFrame
    kernels: tuple[str, ...]
    blocks: tuple[Block, ...]

    def block(self, role: Role) -> Block | None:
        return next((block for block in self.blocks if block.role is role), None)


@dataclass(frozen=True)
class Structure:
    """The decoder stack of a captured program and the family the decision tree of docs/feature-docs.md#scope-analysis
    sorts it into."""

    layers: tuple[Layer, ...]
    family: Family

    def roles(self) -> tuple[Role, ...]:
        """Roles present in some layer, in the order of Role."""
        present = {block.role for layer in self.layers for block in layer.blocks}
        return tuple(role for role in Role if role in present)

    def kernels_of(self, role: Role) -> list[tuple[Layer, Block]]:
        return [(layer, block) for layer in self.layers if (block := layer.block(role)) is not None]


def _is_layer(frame: ModuleFrame) -> bool:
    return "." in frame.path and frame.path.rsplit(".", 1)[1].isdigit() or frame.path.isdigit()


def _container(frame: ModuleFrame) -> str:
    return frame.path.rsplit(".", 1)[0] if "." in frame.path else ""


def _members(program: Program) -> dict[ModuleFrame, list[Kernel]]:
    """Kernels traced inside each module call, every enclosing frame counted, in program order."""
    members: dict[ModuleFrame, list[Kernel]] = {}
    for kernel in program.kernels:
        for frame in kernel.modules:
            members.setdefault(frame, []).append(kernel)
    return members


def _role(frame: ModuleFrame, kernels: Sequence[Kernel]) -> Role | None:
    name = f"{frame.path.rsplit('.', 1)[-1]} {frame.type}".lower()
    for role, hints in _NAME_HINTS:
        if any(hint in name for hint in hints):
            return role
    op_types = " ".join(kernel.op_type for kernel in kernels).lower()
    for role, hints in _OP_HINTS:
        if any(hint in op_types for hint in hints):
            return role
    engines = {kernel.info.engine for kernel in kernels}
    return Role.FFN if "cube" in engines else None


def _blocks(layer: ModuleFrame, members: Mapping[ModuleFrame, list[Kernel]]) -> tuple[Block, ...]:
    prefix = f"{layer.path}."
    children = [f for f in members if f.path.startswith(prefix) and "." not in f.path[len(prefix):]]
    blocks = []
    taken: set[Role] = set()
    for child in children:
        role = _role(child, members[child])
        if role is not None and role not in taken:
            taken.add(role)
            blocks.append(Block(child, role, tuple(kernel.name for kernel in members[child])))
    return tuple(blocks)


def _family(layers: Sequence[Layer]) -> Family:
    roles = {block.role for layer in layers for block in layer.blocks}
    if Role.MOE in roles:
        return Family.MOE
    if Role.ATTENTION in roles and Role.FFN in roles:
        return Family.STANDARD
    return Family.OTHER


def structure_of(program: Program) -> Structure:
    """Find the decoder layers of ``program`` and their attention / MoE / FFN blocks."""
    members = _members(program)
    stacks: dict[str, list[ModuleFrame]] = {}
    for frame in members:
        if _is_layer(frame):
            stacks.setdefault(_container(frame), []).append(frame)
    if not stacks:
        return Structure((), Family.OTHER)
    container = max(stacks, key=lambda name: (sum(len(members[f]) for f in stacks[name]), name))
    layers = tuple(
        Layer(index, frame, tuple(kernel.name for kernel in members[frame]), _blocks(frame, members))
        for index, frame in enumerate(stacks[container])
    )
    return Structure(layers, _family(layers))
