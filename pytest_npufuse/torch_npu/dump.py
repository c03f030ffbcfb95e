"""``torch_npu.save_npugraph_tensor``: save a tensor to a file from eager code or inside a graph.

A ``print`` or ``torch.save`` inside a compiled function breaks the graph; this op stays in it and, on a
device, runs as a host function launched on the stream (aclrtLaunchHostFunc), so an aclgraph replay
saves the tensor each time it passes. The file is ``torch.save`` of the tensor at ``save_path`` with the
device and a running count before the suffix: ``./x.pt`` -> ``./x_device_0_0.pt``, then ``_1`` on the
next save to the same path (Ascend/torchair docs/zh/npugraph_ex/dfx/data_dump.md; Ascend Extension for
PyTorch API reference, torch_npu.save_npugraph_tensor). The suffix is ``.pt`` or ``.bin``; without a path
the file is ``tensor_<timestamp>`` in the working directory. TorchAir's aclgraph data dump
(``dump_config.enable_dump``) skips a node that is already saved this way.
"""

from __future__ import annotations

import io
import itertools
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator, Optional

import torch

from ..errors import OpArgumentError, OpTypeError
from ..files import write_bytes
from ..session import Scope, SessionKey, current_session
from .registry import Arguments, SampleCall, no_outputs, npu_op

SUFFIXES = (".pt", ".bin")
DEVICE = 0  # the model has one device
# Per path, the count of the next save: one per process, as the files are the process's (a later check or
# test saving to the same path must not overwrite an earlier one's file).
_COUNTS: SessionKey[defaultdict[Path, Iterator[int]]] = SessionKey(
    "save_npugraph_tensor counts", lambda: defaultdict(itertools.count), Scope.PROCESS
)


def saved_path(save_path: Optional[str]) -> Path:
    """The file the next save to ``save_path`` writes (the count advances)."""
    path = Path(save_path) if save_path is not None else Path(f"tensor_{time.strftime('%Y%m%d%H%M%S')}.pt")
    return path.with_name(f"{path.stem}_device_{DEVICE}_{next(current_session()[_COUNTS][path])}{path.suffix}")


def save_file(value: object, path: Path, what: str) -> None:
    """``torch.save`` of ``value`` to ``path`` through the file layer: the file appears whole (written
    atomically), and a FIFO or device found at its path is refused instead of written to."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    write_bytes(path, buffer.getvalue(), what)


def _check_path(save_path: Optional[str]) -> None:
    if save_path is None:
        return
    if not isinstance(save_path, str):
        raise OpTypeError(
            f"save_npugraph_tensor(save_path=...) takes a str, got {type(save_path).__name__}",
            op="save_npugraph_tensor", argument="save_path",
        )
    if Path(save_path).suffix not in SUFFIXES:
        raise OpArgumentError(
            f"save_npugraph_tensor(save_path={save_path!r}): the file suffix must be .pt or .bin",
            op="save_npugraph_tensor", argument="save_path",
        )


def _kernel(call: Arguments) -> tuple:
    save_file(call.input.detach().clone(), saved_path(call.save_path), "save_npugraph_tensor file")
    return ()


def _samples() -> list[SampleCall]:
    """A save into the system's temporary directory (each run adds one numbered file there)."""
    path = Path(tempfile.gettempdir()) / "npufuse_save_npugraph_tensor_sample.pt"
    return [SampleCall((torch.arange(6.0).reshape(2, 3),), {"save_path": str(path)})]


@npu_op(meta=no_outputs, kernel=_kernel, side_effect=True, samples=_samples)
def save_npugraph_tensor(call: Arguments) -> None:
    """Save ``self`` to ``save_path`` (see the module doc for the file name) when this point runs."""
    _check_path(call.save_path)
