"""HCCL on one CPU machine: the ``"hccl"`` torch.distributed backend as gloo between processes.

Multi-rank NPU code (tensor parallelism, expert parallelism, torch_npu's own MC2 tests) spawns one process
per NPU, calls ``torch.npu.set_device(rank)`` and ``dist.init_process_group(backend="hccl")``, reads the
group's HCCL name with ``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)`` and passes it
to the fused compute-communication (MC2) ops. Here every "NPU" is a CPU process and its tensors are CPU
tensors, so the backend is torch's gloo over the same store (real values cross the processes), with the
method torch_npu's ``ProcessGroupHCCL`` adds. Each group gets an HCCL name, and the MC2 ops resolve the
name they are given to the group (:func:`comm_domain`).

Nothing hangs: joining the group and every collective first wait for all the group's ranks to arrive, at
most the group's timeout (the ``timeout`` given to ``init_process_group``, at most ``HCCL_CONNECT_TIMEOUT``
seconds: CANN's variable for how long a rank waits for the others, 120 by default per CANN's environment
variable reference), and a rank that does not come fails every rank that waits with
:class:`CollectiveTimeoutError` naming the ranks that did not arrive.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from ..errors import CollectiveTimeoutError, HcclSetupError

BACKEND = "hccl"
# CANN's default for HCCL_CONNECT_TIMEOUT, in seconds (CANN environment variable reference, "HCCL_CONNECT_TIMEOUT").
DEFAULT_CONNECT_TIMEOUT_S = 120
NAME_PREFIX = "npufuse_hccl_group_"



@dataclass(frozen=True)
class CommDomain:
    """One process group of the ``"hccl"`` backend as this rank sees it: its HCCL name, this rank in it,
    the global ranks it spans, its store (where ranks announce arrival) and how long a rank waits."""

    name: str
    backend: Any  # the group's gloo backend (an :class:`HcclBackend`)
    store: Any
    rank: int
    global_ranks: tuple[int, ...]
    timeout_s: float
    sequence: Iterator[int]

    @property
    def size(self) -> int:
        return len(self.global_ranks)


# HCCL name -> domain: the groups this process (a real one, not a modeled one) has joined.
_DOMAINS: dict[str, CommDomain] = {}


class HcclBackend(dist.ProcessGroupGloo):
    """The backend of an ``"hccl"`` group: gloo, plus the names torch_npu's ``ProcessGroupHCCL`` adds."""

    def get_hccl_comm_name(self, rank_id: int = 0, init_comm: bool = True) -> str:
        """The group's HCCL name, which the MC2 ops take as ``hcom`` / ``group_ep`` / ``group_tp``."""
        return _domain_of_backend(self).name


def _domain_of_backend(backend: Any) -> CommDomain:
    return next(domain for domain in _DOMAINS.values() if domain.backend is backend)


def connect_timeout_s(group_timeout: timedelta | None) -> float:
    """How long a rank waits for the others: the group's timeout, capped at ``HCCL_CONNECT_TIMEOUT``."""
    text = os.environ.get("HCCL_CONNECT_TIMEOUT", "").strip()
    try:
        configured = float(text) if text else float(DEFAULT_CONNECT_TIMEOUT_S)
    except ValueError:
        configured = math.nan
    if not 0 < configured < math.inf:
        raise HcclSetupError(
            f"environment variable HCCL_CONNECT_TIMEOUT={text[:40]!r} is not a number of seconds above 0; set it "
            f"to how long a rank waits for the others (CANN's default is {DEFAULT_CONNECT_TIMEOUT_S}) or unset it.",
            argument="HCCL_CONNECT_TIMEOUT",
        )
    if group_timeout is None:
        return configured
    return min(group_timeout.total_seconds(), configured)


def env_variable(name: str) -> str:
    """An ``env://`` rendezvous variable (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), which must be set."""
    value = os.environ.get(name)
    if value is None:
        raise HcclSetupError(
            f"init_process_group(backend='hccl') with the env:// rendezvous needs the environment variable {name}; "
            "set MASTER_ADDR, MASTER_PORT (and RANK, WORLD_SIZE unless passed as rank=, world_size=) in every rank.",
            argument=name,
        )
    return value


def env_int(name: str, low: int, high: int) -> int:
    """A whole-number rendezvous variable (RANK, WORLD_SIZE, MASTER_PORT) from ``low`` to ``high``."""
    text = env_variable(name).strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19) or not low <= int(text) <= high:
        raise HcclSetupError(
            f"environment variable {name}={text[:40]!r} is not a whole number from {low} to {high}; "
            "set MASTER_PORT to the rendezvous port, WORLD_SIZE to the number of ranks and RANK to this rank "
            "(0 to WORLD_SIZE - 1) in every rank.", argument=name,
        )
    return int(text)


def env_rank(rank: int, world_size: int) -> tuple[int, int]:
    """The rank and world size of an ``env://`` rendezvous: the arguments, else RANK / WORLD_SIZE."""
    world_size = world_size if world_size >= 0 else env_int("WORLD_SIZE", 1, 2**31 - 1)
    rank = rank if rank >= 0 else env_int("RANK", 0, world_size - 1)
    return rank, world_size


def wait_for_ranks(domain: CommDomain, what: str) -> None:
    """Announce this rank at ``what`` (its next collective on the group) and wait for the other ranks there;
    raise :class:`CollectiveTimeoutError` naming the ranks that did not come within the timeout."""
    step = next(domain.sequence)
    _arrive(domain.store, f"npufuse/arrive/{step}", domain.rank, domain.global_ranks, domain.timeout_s,
            f"{what} (collective #{step} of HCCL group {domain.name!r})")


def _arrive(store: Any, key: str, rank: int, global_ranks: tuple[int, ...], timeout_s: float, what: str) -> None:
    store.set(f"{key}/{rank}", "1")
    keys = [f"{key}/{r}" for r in range(len(global_ranks))]
    try:
        store.wait(keys, timedelta(seconds=timeout_s))
    except (RuntimeError, dist.DistStoreError):
        missing = tuple(global_ranks[r] for r, name in enumerate(keys) if not _present(store, name))
        if not missing:
            return
        error = CollectiveTimeoutError(
            f"{what}: rank(s) {list(missing)} of ranks {list(global_ranks)} did not arrive within {timeout_s:g} s "
            f"(this is rank {global_ranks[rank]}). Every rank of a group must make the same collective calls in "
            "the same order; look for a rank that crashed, exited early or took another branch. To wait longer, "
            "pass a larger timeout= to init_process_group and raise HCCL_CONNECT_TIMEOUT (seconds)."
        )
        error.missing = missing
        raise error from None


def _present(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except RuntimeError:  # the store's server (rank 0's process) is gone
        return False


def _create_backend(prepare_device: Callable[[], None]) -> Callable[[Any, Any], HcclBackend]:
    """torch.distributed's creator of an ``"hccl"`` backend (the extended API, which names the group)."""

    def create(options: Any, backend_options: Any) -> HcclBackend:
        prepare_device()
        ranks = tuple(options.global_ranks_in_group) or tuple(range(options.group_size))
        timeout_s = connect_timeout_s(options.timeout)
        name = f"{NAME_PREFIX}{options.group_id}"
        _arrive(options.store, "npufuse/join", options.group_rank, ranks, timeout_s,
                f"init_process_group(backend='hccl') of HCCL group {name!r}")
        backend = HcclBackend(options.store, options.group_rank, options.group_size, timedelta(seconds=timeout_s))
        _DOMAINS[name] = CommDomain(name, backend, options.store, options.group_rank, ranks, timeout_s,
                                    itertools.count())
        return backend

    return create


def register_hccl_backend(prepare_device: Callable[[], None]) -> None:
    """Make ``backend="hccl"`` known to torch.distributed for CPU and ``npu`` tensors (once per process).
    ``prepare_device`` runs before the first group is made: it makes ``torch.device("npu")`` known."""
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create_backend(prepare_device), extended_api=True, devices=["cpu", "npu"])


def comm_domain(name: str) -> CommDomain | None:
    """The group whose HCCL name is ``name``, if this process joined one; None otherwise (a one-rank world:
    the name of a group nobody created, as in single-process code and the ops' samples)."""
    return _DOMAINS.get(name)


def domain_of_group(group: Any) -> CommDomain | None:
    """The ``"hccl"`` domain of a torch.distributed group (None: the default group), if it is one."""
    if group is None:
        if not dist.is_initialized():
            return None
        group = dist.distributed_c10d._get_default_group()
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError:
        return None
    return _domain_of_backend(backend) if isinstance(backend, HcclBackend) else None


def all_reduce_sum(domain: CommDomain, tensor: torch.Tensor, what: str) -> torch.Tensor:
    """``tensor`` summed over the domain's ranks (in place, and returned), after every rank arrived."""
    wait_for_ranks(domain, what)
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.SUM
    domain.backend.allreduce([tensor], options).wait()
    return tensor


def all_gather_rows(domain: CommDomain, tensor: torch.Tensor, what: str) -> list[torch.Tensor]:
    """Every rank's ``tensor`` (any dtype; first dimensions may differ between ranks), in rank order. The
    rows travel as bytes, so every dtype crosses gloo as it is."""
    wait_for_ranks(domain, what)
    rows = torch.tensor([tensor.shape[0] if tensor.dim() else 1], dtype=torch.int64)
    counts = [torch.zeros_like(rows) for _ in range(domain.size)]
    domain.backend.allgather([counts], [rows]).wait()
    longest = int(max(count.item() for count in counts))
    flat = tensor.reshape(rows.item(), -1).contiguous()
    padded = torch.zeros(longest, flat.shape[1], dtype=flat.dtype)
    padded[: flat.shape[0]] = flat
    raw = padded.view(torch.uint8) if padded.dtype != torch.bool else padded.to(torch.uint8)
    received = [torch.empty_like(raw) for _ in range(domain.size)]
    domain.backend.allgather([received], [raw.contiguous()]).wait()
    return [
        _from_bytes(data, flat.dtype)[: int(count.item())].reshape(int(count.item()), *tensor.shape[1:])
        for data, count in zip(received, counts)
    ]


def _from_bytes(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return data.to(torch.bool) if dtype == torch.bool else data.view(dtype)
