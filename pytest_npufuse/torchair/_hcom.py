"""``torchair.patch_for_hcom()``: torch.distributed's collectives, called in a compiled model, become
collective ops of its graph.

TorchAir replaces ``torch.distributed.all_reduce``, ``all_gather``, ``all_gather_into_tensor``,
``broadcast``, ``all_to_all_single`` and ``all_to_all`` (and deepspeed's ``all_reduce`` /
``inference_all_reduce`` when deepspeed is installed) with functions that call the original collective
in eager code and, while Dynamo traces, put a functional collective in the graph and copy its result into
the tensor the caller passed (torchair: python/torchair/__init__.py ``patch_for_hcom`` and
python/torchair/_ge_concrete_graph/ge_converter/experimental/hcom_*.py, commit fced8842). TorchAir's own
graph ops (``npu_define::allreduce`` ...) become HCCL ops in GE; the model's graph takes torch's
functional collectives (``_c10d_functional::all_reduce``, ``all_gather_into_tensor``, ``broadcast``,
``all_to_all_single``), which it already prices on the communication engine (``target/data/ops.toml``)
and which SuperKernel scopes may fuse. From torch 2.3.1 Dynamo traces ``all_reduce``,
``all_gather_into_tensor`` and ``all_to_all_single`` itself, and TorchAir says so with a warning; the
patch still makes ``broadcast``, ``all_gather`` and ``all_to_all`` traceable. In a compiled graph,
``async_op=True`` is TorchAir's AssertionError, as on a device. The patch stays for the process, as TorchAir's
does; eager calls behave exactly as before it.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.distributed_c10d as c10d

from ..errors import OpAssertionError
from .core.utils import logger

__all__ = ["patch_for_hcom", "patch_all_reduce", "patch_all_gather"]

# torch.distributed.ReduceOp -> the name a functional collective takes.
_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max", dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor",
}


def _no_async(async_op: bool) -> None:
    """A graph has no work handle to wait on: TorchAir refuses ``async_op=True`` in compiled code."""
    if async_op:
        raise OpAssertionError(
            "When you enable torch.compile or use the cache_compile feature, use the patch_for_hcom interface to "
            "ensure that collective communication functions are included in the graph. However, unlike the eager "
            "mode, the compile mode does not support the async_op = True parameter for collective communication APIs."
        )


def _group(group: Any) -> Any:
    return dist.group.WORLD if group is None else group


def all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
    """``torch.distributed.all_reduce`` under ``patch_for_hcom``."""
    if not funcol._are_we_tracing():
        return c10d.all_reduce(tensor, op, group, async_op)
    _no_async(async_op)
    tensor.copy_(funcol.all_reduce(tensor, op if isinstance(op, str) else _REDUCE_OPS[op], _group(group)))
    return None


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> Any:
    """``torch.distributed.all_gather`` under ``patch_for_hcom``: one gather along dim 0, split per rank."""
    if not funcol._are_we_tracing():
        return c10d.all_gather(tensor_list, tensor, group, async_op)
    _no_async(async_op)
    gathered = funcol.all_gather_tensor(tensor, 0, _group(group))
    for out, part in zip(tensor_list, torch.chunk(gathered, len(tensor_list))):
        out.copy_(part.view_as(out))
    return None


def all_gather_into_tensor(
    output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any = None, async_op: bool = False
) -> Any:
    """``torch.distributed.all_gather_into_tensor`` under ``patch_for_hcom``: the output may be the ranks'
    inputs concatenated or stacked, as torch allows."""
    if not funcol._are_we_tracing():
        return c10d.all_gather_into_tensor(output_tensor, input_tensor, group, async_op)
    _no_async(async_op)
    output_tensor.copy_(funcol.all_gather_tensor(input_tensor, 0, _group(group)).view(output_tensor.shape))
    return None


def broadcast(
    tensor: torch.Tensor, src: int | None = None, group: Any = None, async_op: bool = False, group_src: int | None = None
) -> Any:
    """``torch.distributed.broadcast`` under ``patch_for_hcom``; ``group_src`` is a rank of ``group``."""
    if not funcol._are_we_tracing():
        return c10d.broadcast(tensor, src, group, async_op, group_src)
    _no_async(async_op)
    group = _group(group)
    source = dist.get_global_rank(group, group_src) if group_src is not None else src
    tensor.copy_(funcol.broadcast(tensor, source, group))
    return None


def all_to_all_single(
    output: torch.Tensor,
    input: torch.Tensor,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: Any = None,
    async_op: bool = False,
) -> Any:
    """``torch.distributed.all_to_all_single`` under ``patch_for_hcom``."""
    if not funcol._are_we_tracing():
        return c10d.all_to_all_single(output, input, output_split_sizes, input_split_sizes, group, async_op)
    _no_async(async_op)
    output.copy_(funcol.all_to_all_single(input, output_split_sizes, input_split_sizes, _group(group)))
    return None


def all_to_all(
    output_tensor_list: list[torch.Tensor], input_tensor_list: Sequence[torch.Tensor], group: Any = None, async_op: bool = False
) -> Any:
    """``torch.distributed.all_to_all`` under ``patch_for_hcom``: as TorchAir, the inputs flattened and
    concatenated, one all-to-all of their element counts, the result split back into the outputs."""
    if not funcol._are_we_tracing():
        return c10d.all_to_all(output_tensor_list, input_tensor_list, group, async_op)
    _no_async(async_op)
    if len(input_tensor_list) != len(output_tensor_list):
        raise OpAssertionError(
            f"all_to_all: {len(input_tensor_list)} input tensors but {len(output_tensor_list)} output tensors; "
            "pass one of each per rank."
        )
    send = [t.numel() for t in input_tensor_list]
    receive = [t.numel() for t in output_tensor_list]
    flat = torch.cat([t.flatten() for t in input_tensor_list])
    exchanged = funcol.all_to_all_single(flat, receive, send, _group(group))
    for out, part in zip(output_tensor_list, torch.split(exchanged, receive)):
        out.copy_(part.view(out.shape))
    return None


def patch_all_reduce() -> None:
    """``torch.distributed.all_reduce`` (and deepspeed's, when installed) traceable into the graph."""
    dist.all_reduce = all_reduce
    try:
        from deepspeed import comm as deepspeed_comm  # type: ignore[import-not-found]
    except Exception as exc:  # any failure to import deepspeed: TorchAir patches torch alone then
        logger.info(f"env import deepspeed error {exc}, only patch pytorch dist api")
    else:
        deepspeed_comm.all_reduce = all_reduce
        deepspeed_comm.inference_all_reduce = all_reduce


def patch_all_gather() -> None:
    """``torch.distributed.all_gather`` and ``all_gather_into_tensor`` traceable into the graph."""
    dist.all_gather = all_gather
    dist.all_gather_into_tensor = all_gather_into_tensor


def patch_for_hcom() -> None:
    """Make torch.distributed's collectives in compiled code collective ops of the graph (see the module)."""
    if torch.__version__ >= "2.3.1":
        logger.warning("For versions 2.3.1 and above of PyTorch, there is no need to call patch_for_hcom anymore.")
    patch_all_reduce()
    patch_all_gather()
    dist.broadcast = broadcast
    dist.all_to_all_single = all_to_all_single
    dist.all_to_all = all_to_all
