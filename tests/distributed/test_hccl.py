"""Several NPUs on one CPU: one spawned process per rank, an ``"hccl"`` group between them, collectives and
the MC2 matmul + all-reduce computing across the processes, and a rank that never comes named in an error.

The ranks are spawned from the test itself: under pytest the processes a test starts get the shim (and
the run's target), as under ``python -m pytest_npufuse run``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
from datetime import timedelta

import pytest
import torch

from pytest_npufuse.errors import HcclSetupError
from pytest_npufuse.torch_npu import distributed

WORLD = 2


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _join(rank: int, world: int, port: str, timeout_s: float = 120) -> None:
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
    torch.npu.set_device(rank)
    dist.init_process_group(backend="hccl", world_size=world, rank=rank, timeout=timedelta(seconds=timeout_s))


def _operands(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(rank)
    return torch.randn(3, 16, generator=gen).half(), torch.randn(16, 5, generator=gen).half()


def _rank_work(rank: int, world: int, port: str, results: mp.Queue) -> None:
    """What a tensor-parallel rank does: join, name the group, all-reduce, matmul + all-reduce."""
    import torch.distributed as dist
    import torch_npu

    _join(rank, world, port)
    group = dist.distributed_c10d._get_default_group()
    name = group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    summed = torch.full((4,), float(rank + 1)).npu()
    dist.all_reduce(summed)
    x1, x2 = _operands(rank)
    product = torch_npu.npu_mm_all_reduce_base(x1.npu(), x2.npu(), name, reduce_op="sum")
    results.put((rank, torch.npu.current_device(), torch.npu.device_count(), name, _plain(summed), _plain(product)))
    dist.barrier()
    dist.destroy_process_group()


def _lonely_rank(rank: int, world: int, port: str, results: mp.Queue) -> None:
    """Rank 0 of a world of two whose rank 1 never starts: it must fail, naming rank 1."""
    try:
        _join(rank, world, port, timeout_s=5)
        results.put(("joined", ""))
    except Exception as error:  # noqa: BLE001 - the error itself is what the test reads
        results.put((type(error).__name__, str(error)))


def _plain(tensor: torch.Tensor) -> tuple[list, torch.dtype]:
    """A tensor as values: a tensor put on a queue travels as shared memory the exiting rank takes along."""
    return tensor.tolist(), tensor.dtype


def _tensor(plain: tuple[list, torch.dtype]) -> torch.Tensor:
    return torch.tensor(plain[0], dtype=plain[1])


def _spawn(target, ranks: range, world: int) -> list[tuple]:
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    processes = [context.Process(target=target, args=(rank, world, port, results)) for rank in ranks]
    for process in processes:
        process.start()
    try:
        return [results.get(timeout=300) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()


def test_two_ranks_all_reduce_name_their_group_and_sum_matmuls_across_processes():
    reports = sorted(_spawn(_rank_work, range(WORLD), WORLD), key=lambda report: report[0])
    names = {report[3] for report in reports}
    assert len(names) == 1 and next(iter(names)).startswith("npufuse_hccl_group_")
    expected = sum(torch.matmul(*(t.float() for t in _operands(rank))) for rank in range(WORLD)).half()
    for rank, (reported, current, count, _, summed, product) in enumerate(reports):
        assert (reported, current, count) == (rank, rank, torch.npu.device_count())
        assert count in (8, 16)  # an A2 server's NPUs, an A3 node's dies
        assert _tensor(summed).tolist() == [3.0] * 4
        torch.testing.assert_close(_tensor(product), expected, rtol=1e-3, atol=1e-2)


def test_a_rank_that_never_joins_is_named_in_a_timeout_error_not_a_hang():
    [(kind, message)] = _spawn(_lonely_rank, range(1), WORLD)
    assert kind == "CollectiveTimeoutError"
    assert "rank(s) [1] of ranks [0, 1] did not arrive within 5 s" in message
    assert "init_process_group(backend='hccl')" in message


def _rank_that_leaves(rank: int, world: int, port: str, results: mp.Queue) -> None:
    """Both ranks join; rank 1 then leaves, and rank 0's all_reduce must fail naming it."""
    import torch.distributed as dist

    _join(rank, world, port, timeout_s=5)
    if rank == 1:
        results.put((rank, "left", ""))
        return
    try:
        dist.all_reduce(torch.ones(2).npu())
        results.put((rank, "reduced", ""))
    except Exception as error:  # noqa: BLE001 - the error itself is what the test reads
        results.put((rank, type(error).__name__, str(error)))


def test_a_collective_a_rank_skips_names_that_rank():
    reports = sorted(_spawn(_rank_that_leaves, range(WORLD), WORLD))
    (_, kind, message), (_, left, _) = reports
    assert (kind, left) == ("CollectiveTimeoutError", "left")
    assert "torch.distributed.all_reduce (collective #0 of HCCL group" in message
    assert "rank(s) [1] of ranks [0, 1] did not arrive within 5 s (this is rank 0)" in message


def _routing(rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A rank's 4 bfloat16 tokens, their top-2 of 4 experts (distinct per token) and routing weights."""
    gen = torch.Generator().manual_seed(10 + rank)
    x = torch.randn(4, 8, generator=gen).bfloat16()
    ids = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(4)]).to(torch.int32)
    return x, ids, torch.rand(4, 2, generator=gen)


def _expert_parallel_rank(rank: int, world: int, port: str, results: mp.Queue) -> None:
    """Dispatch this rank's tokens to the experts' ranks, let every expert be the identity, combine back."""
    import torch.distributed as dist
    import torch_npu

    _join(rank, world, port)
    group = dist.distributed_c10d._get_default_group()
    name = group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    x, ids, weights = _routing(rank)
    expand_x, _, expand_idx, token_nums, recv_counts, *_ = torch_npu.npu_moe_distribute_dispatch(
        x, ids, name, world, rank, 4, expert_token_nums_type=1)
    combined = torch_npu.npu_moe_distribute_combine(expand_x, ids, expand_idx, recv_counts, weights, name, world,
                                                    rank, 4)
    results.put((rank, _plain(expand_x), _plain(token_nums), _plain(combined)))
    dist.barrier()
    dist.destroy_process_group()


def test_two_ranks_dispatch_tokens_to_their_experts_ranks_and_combine_them_back():
    reports = sorted(_spawn(_expert_parallel_rank, range(WORLD), WORLD), key=lambda report: report[0])
    routings = [_routing(rank) for rank in range(WORLD)]
    for rank, *plain in reports:
        expand_x, token_nums, combined = (_tensor(values) for values in plain)
        experts = range(2 * rank, 2 * rank + 2)  # 4 experts over 2 ranks: this rank's 2
        expected_rows = [routings[source][0][token] for expert in experts for source in range(WORLD)
                         for token, slot in torch.nonzero(routings[source][1] == expert).tolist()]
        assert token_nums.tolist() == [sum(int((r[1] == e).sum()) for r in routings) for e in experts]
        assert torch.equal(expand_x[: len(expected_rows)], torch.stack(expected_rows))
        x, _, weights = routings[rank]
        torch.testing.assert_close(combined, (x.float() * weights.sum(-1, keepdim=True)).bfloat16())


@pytest.mark.parametrize(("name", "value", "call"), [
    ("HCCL_CONNECT_TIMEOUT", "soon", lambda: distributed.connect_timeout_s(None)),
    ("HCCL_CONNECT_TIMEOUT", "nan", lambda: distributed.connect_timeout_s(None)),
    ("HCCL_CONNECT_TIMEOUT", "-5", lambda: distributed.connect_timeout_s(timedelta(seconds=3))),
    ("WORLD_SIZE", "-2", lambda: distributed.env_rank(-1, -1)),
    ("WORLD_SIZE", "9" * 40, lambda: distributed.env_rank(0, -1)),
    ("RANK", "zero", lambda: distributed.env_rank(-1, 2)),
    ("RANK", "2", lambda: distributed.env_rank(-1, 2)),
    ("MASTER_PORT", "http", lambda: distributed.env_int("MASTER_PORT", 1, 65535)),
    ("MASTER_PORT", "70000", lambda: distributed.env_int("MASTER_PORT", 1, 65535)),
])
def test_a_rendezvous_variable_that_is_not_a_number_in_range_is_named(monkeypatch, name, value, call):
    """Junk in the environment a launcher set: an error naming the variable, not torch's int() or
    AssertionError from inside init_process_group."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(name, value)
    with pytest.raises(HcclSetupError) as exc:
        call()
    assert exc.value.argument == name


def test_the_connect_timeout_defaults_to_canns_and_caps_the_groups(monkeypatch):
    monkeypatch.delenv("HCCL_CONNECT_TIMEOUT", raising=False)
    assert distributed.connect_timeout_s(None) == distributed.DEFAULT_CONNECT_TIMEOUT_S
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "30")
    assert distributed.connect_timeout_s(timedelta(seconds=300)) == 30.0
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "+2")
    assert distributed.env_rank(-1, -1) == (1, 2)
