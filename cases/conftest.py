"""Shared pieces of the bundled regression cases."""

import pytest
import torch.distributed as dist

# Scripts written for a real NPU (run with `python -m pytest_npufuse run`), not test modules: importing
# multistream_example.py would run it.
collect_ignore = ["scripts"]


@pytest.fixture(scope="session")
def world() -> "dist.ProcessGroup":
    """A one-rank gloo process group, so models with collectives run on a CPU exactly as written."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD
