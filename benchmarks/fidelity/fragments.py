"""Fragment rows (``metric = "fragment"``): a few lines of model code that a source profiles run eagerly
and compiled by ``torch.compile``, captured here as the source writes them.

The fragment is captured on the row's input shapes and dtypes (meta tensors), so the eager side is the
kernels torch_npu launches op by op, and the compiled side is that program as Inductor with
inductor_npu_ext compiles it (:func:`pytest_npufuse.frontend.inductor.fuse_pointwise`: its pointwise and
reduction ops as one generated Vector kernel). Each side is timed as the source's profiler reports one
call: the device time of its kernels, summed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pytest_npufuse import capture
from pytest_npufuse.frontend.inductor import fuse_pointwise
from pytest_npufuse.ir.program import Program
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.timeline import simulate

from . import models
from .rows import Profiles, Row


def hc_post(x: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V4's mHC output mix, with the ops the cann-recipes-infer README profiles
    (models/deepseek_v4_flash_tilelang_and_inductor_af/README.md @fbc225d2, lines 69-71): each of the
    ``hc`` streams gets ``post`` times the block's output ``x`` plus the ``comb``-weighted sum of the
    incoming streams ``residual``, computed in float32 and returned in ``x``'s dtype."""
    weighted = post.unsqueeze(-1) * x.unsqueeze(-2)
    return (weighted + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)).type_as(x)


FRAGMENTS: dict[str, Callable[..., torch.Tensor]] = {"hc_post": hc_post}


_PROGRAMS: dict[str, tuple[Program, Program]] = {}


def programs(row: Row) -> tuple[Program, Program]:
    """The row's fragment captured on its inputs (``inputs``: shape and dtype of each argument), and that
    program as Inductor compiles it; built once (a fit prices them under many profiles)."""
    if row.id not in _PROGRAMS:
        fragment = FRAGMENTS.get(row.get("fragment"))
        if fragment is None:
            raise ValueError(
                f"row {row.id}: fragment = {row.get('fragment')!r} is not a fragment this benchmark can "
                f"capture; use one of {sorted(FRAGMENTS)} or add its code to fragments.FRAGMENTS"
            )
        meta = torch.device("meta")
        args = [torch.empty(tensor["shape"], dtype=_dtype(row, tensor["dtype"]), device=meta)
                for tensor in row.get("inputs")]
        eager = capture(fragment, *args)
        _PROGRAMS[row.id] = eager, fuse_pointwise(eager, models.catalog())
    return _PROGRAMS[row.id]


def _dtype(row: Row, name: str) -> torch.dtype:
    """The torch dtype an input names (``bfloat16``, ``float32``, ...)."""
    dtype = getattr(torch, str(name), None)
    if isinstance(dtype, torch.dtype):
        return dtype
    raise ValueError(f"row {row.id}: input dtype {name!r} is not a torch dtype; write e.g. 'bfloat16' or 'float32'")


def _kernel_us(key: tuple, program: Program, profiles: Profiles, row: Row) -> float:
    """Summed device time of the program's kernels, launched one by one from the host (torch_npu's eager
    dispatch; Inductor's wrapper code calls its kernels the same way)."""
    profile = profiles.for_row(row)
    plan = models.plan_of(key, program, profile, variant=Variant.BASELINE, mode="eager")
    return sum(k.duration_us for k in simulate(program, plan, profile).kernels if k.parent is None)


def fragment_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    """The fragment's kernel time per call in eager (before) and compiled by Inductor (after), in us."""
    eager, compiled = programs(row)
    return (
        _kernel_us((row.id, "eager"), eager, profiles, row),
        _kernel_us((row.id, "inductor"), compiled, profiles, row),
    )
