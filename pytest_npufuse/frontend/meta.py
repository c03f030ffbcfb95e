"""Models without weights: parameters, buffers and inputs on the meta device, captured for timing only.

A model at its real size does not fit a CI machine (DeepSeek-V3 holds 671B parameters), but the cost
model needs only shapes and dtypes, which a tensor on PyTorch's ``meta`` device has without any
storage. Such a model is captured as any other (Dynamo's fake tensors are made from the meta tensors),
so every modeled time, scope, stream and race is the same as with real weights; only the numbers are
not computed. A model is *weightless* when a parameter, a buffer or an input is on the meta device;
its other inputs are then taken to the meta device too, so one op never mixes the two.

:func:`init_empty_weights` is the way to build one: every tensor created inside is on the meta device
(``torch.device("meta")``), including those a script creates with ``device="npu"`` under the shim, so
``with init_empty_weights(): model = DeepseekV3(config)`` allocates nothing at any size.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
import torch.utils._pytree as pytree

from ..session import Scope, SessionKey, current_session

# The nesting depth of open npu_is_meta blocks. Each block takes back its own step, so nothing outlives
# it; a session inside one (a check run inside ``init_empty_weights()``) shares its parent's depth.
_DEPTH: SessionKey[list[int]] = SessionKey("npu_is_meta depth", lambda: [0], Scope.INHERITED)


@contextlib.contextmanager
def npu_is_meta() -> Iterator[None]:
    """Inside, the shim puts a tensor created "on the NPU" (``device="npu"``, ``.to("npu")``) on the meta
    device: a timing-only model's forward creates its tensors where its weights are."""
    depth = current_session()[_DEPTH]
    depth[0] += 1
    try:
        yield
    finally:
        depth[0] -= 1


@contextlib.contextmanager
def init_empty_weights() -> Iterator[None]:
    """Every tensor created inside the block is on the meta device: shapes and dtypes, no storage.

    Build a model at its real size inside it (from a Hugging Face-style config dict or any constructor
    arguments) and pass it to ``compare``, ``npufuse.check`` or ``advise``: it is priced in full and its
    report says its numerics were not computed (or computed on a sample of layers, ``numerics="sample"``).
    """
    with npu_is_meta(), torch.device("meta"):
        yield


def creating_empty() -> bool:
    """Whether an :func:`init_empty_weights` or :func:`npu_is_meta` block is open (the shim then maps
    ``npu`` to ``meta``)."""
    return current_session()[_DEPTH][0] > 0


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def weightless(model: Callable[..., Any], inputs: Sequence[Any]) -> bool:
    """Whether ``model`` on ``inputs`` is timing-only: a parameter, buffer or input is on the meta device."""
    if isinstance(model, torch.nn.Module):
        for tensor in (*model.parameters(), *model.buffers()):
            if tensor.is_meta:
                return True
    return any(tensor.is_meta for tensor in _tensors(list(inputs)))


def resident_tensors(model: Callable[..., Any], inputs: Sequence[Any]) -> dict[str, int]:
    """Bytes of what must sit in device memory before the model runs, by the user's name: each parameter
    and buffer of a module (a tied one once) and each input tensor (``input[i]``, its leaves in order)."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    named = [*model.named_parameters(), *model.named_buffers()] if isinstance(model, torch.nn.Module) else []
    named += [(f"input[{position}]", tensor) for position, value in enumerate(inputs) for tensor in _tensors([value])]
    for name, tensor in named:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            sizes[name] = tensor.numel() * tensor.element_size()
    return sizes


def on_meta(inputs: Sequence[Any]) -> tuple[list[Any], dict[int, torch.Tensor]]:
    """``inputs`` with every tensor on the meta device (same shape, strides and dtype), and the real
    tensor each new meta tensor stands for (by ``id`` of the meta tensor; meta inputs stand for none)."""
    real: dict[int, torch.Tensor] = {}

    def to_meta(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.is_meta:
            return leaf
        meta = torch.empty_strided(leaf.shape, leaf.stride(), dtype=leaf.dtype, device="meta")
        real[id(meta)] = leaf
        return meta

    return [pytree.tree_map(to_meta, value) for value in inputs], real


def traced_on_meta(gm: torch.fx.GraphModule) -> bool:
    """Whether a captured graph is a timing-only model's: one of its inputs was a meta tensor."""
    return any(
        node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor) and node.meta["val"].is_meta
        for node in gm.graph.nodes
    )
