"""torch.distributed under the shim: the ``"hccl"`` backend, and collectives that never hang.

A process that calls ``dist.init_process_group(backend="hccl")`` gets a gloo group between the processes
(:mod:`pytest_npufuse.torch_npu.distributed`), and ``torch.device("npu")`` becomes a device torch knows
(``group._get_backend(torch.device("npu"))`` is how torch_npu code reaches the HCCL backend). The
torch.distributed collectives are wrapped so that on an ``"hccl"`` group every rank first waits for the
others: a rank that never comes fails the waiting ones with an error naming it, instead of a hang.
"""

from __future__ import annotations

import functools
import inspect
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..torch_npu import distributed
from . import devices
from .undo import patch

# The torch.distributed calls every rank of the group makes together.
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list", "reduce",
    "gather", "scatter", "barrier", "all_reduce_coalesced", "_all_gather_base", "_reduce_scatter_base",
)


def install_collectives() -> None:
    """Register the ``"hccl"`` backend and wrap torch.distributed's collectives (undone with the shim)."""
    if not dist.is_available():
        return
    distributed.register_hccl_backend(_name_npu_device)
    patch(dist, "init_process_group", _with_own_store(dist.init_process_group))
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is not None:
            patch(dist, name, _waiting(name, original))


def _name_npu_device() -> None:
    """Make ``torch.device("npu")`` known (PrivateUse1 named ``npu``, with the runtime the shim provides)."""
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    devices.provide_privateuse1_runtime()


def _with_own_store(original: Callable[..., Any]) -> Callable[..., Any]:
    """``init_process_group`` that, for ``backend="hccl"`` with the ``env://`` rendezvous, makes the TCP
    store itself without waiting for the other ranks to connect to it: the backend's own wait then names
    the ranks that never came, where torch's store would only count them."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind_partial(*args, **kwargs).arguments
        if str(call.get("backend")).lower() != distributed.BACKEND or call.get("store") is not None:
            return original(*args, **kwargs)
        if call.get("init_method") not in (None, "env://"):
            return original(*args, **kwargs)
        rank, size = distributed.env_rank(call.get("rank", -1), call.get("world_size", -1))
        timeout = call.get("timeout")
        store = dist.TCPStore(
            distributed.env_variable("MASTER_ADDR"), distributed.env_int("MASTER_PORT", 1, 65535), size, rank == 0,
            timedelta(seconds=distributed.connect_timeout_s(timeout)), wait_for_workers=False,
        )
        kwargs = {**call, "store": store, "rank": rank, "world_size": size}
        kwargs.pop("init_method", None)
        return original(**kwargs)

    return init_process_group


def _waiting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a collective) preceded, on an ``"hccl"`` group, by the wait for every rank."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        try:
            group = signature.bind_partial(*args, **kwargs).arguments.get("group")
        except TypeError:  # arguments torch itself refuses, with its own message
            return original(*args, **kwargs)
        domain = distributed.domain_of_group(group)
        if domain is not None and domain.size > 1:
            distributed.wait_for_ranks(domain, f"torch.distributed.{name}")
        return original(*args, **kwargs)

    return collective
