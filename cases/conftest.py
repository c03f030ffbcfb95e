"""Shared pieces of the bundled regression cases."""

import pytest
import torch.distributed as dist


@pytest.fixture(scope="session")
def world() -> "dist.ProcessGroup":
    """A one-rank gloo process group, so models with collectives run on a CPU exactly as written."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD
