"""The host rows of docs/feature-docs.md#host-scheduling: a captured LLaMA-2 decode step under GE host scheduling.

The small-shape row compares the step with GE's small-shape ops launched on the device (before) and
computed on the host (after); the size sweep checks the article's claim that the tiling cache helps larger
models more ("模型参数量越大，优化效果越显著", pangu-38B its example), with LLaMA-shaped models of growing size.
"""

from __future__ import annotations

from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import simulate
from pytest_npufuse.target.profile import HardwareProfile

from .llama import captured_llama
from .models import plan_of
from .rows import Profiles, Row

# (name, hidden, layers, heads, ffn, vocab): LLaMA-2 7B and 13B (HF configs), and a 33B-class model with
# LLaMA-1 33B's published dims standing in for pangu-38B, whose config is not public.
SIZES = (
    ("LLaMA-2 7B", 4096, 32, 32, 11008, 32000),
    ("LLaMA-2 13B", 5120, 40, 40, 13824, 32000),
    ("33B-class (pangu-38B stand-in)", 6656, 60, 52, 17920, 32000),
)


def _run(dims: tuple[int, ...], profile: HardwareProfile, **host):
    """The captured LLaMA of ``dims`` (hidden, layers, heads, ffn, vocab) under GE host scheduling."""
    program = captured_llama(*dims)
    plan = plan_of(("captured llama", dims), program, profile, variant=Variant.BASELINE)
    return simulate(program, plan, profile, dynamic=True, host=HostConfig(**{"threads": 1, **host}))


def host_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    """End-to-end step time with the small-shape ops launched on the device (before) and computed on the
    host (after), one host thread, warm tiling cache."""
    dims = tuple(row.model[key] for key in ("hidden", "layers", "heads", "ffn", "vocab"))
    profile = profiles.for_row(row)
    return _run(dims, profile, small_shape_on_host=False).time_us, _run(dims, profile).time_us


def _tiling_us(report) -> float:
    return sum(s.end_us - s.start_us for s in report.host if s.name in ("Tiling", "TilingCacheHit"))


def size_sweep(profile: HardwareProfile) -> list[tuple[str, int, float, float, int]]:
    """Per model size: the first iteration's host Tiling time cut by the cache (%), the steady-state step
    gain of the cache (%), and how many of GE's size ops the capture found."""
    rows = []
    for name, *sizes in SIZES:
        dims = tuple(sizes)
        cold = _tiling_us(_run(dims, profile, warm_tiling_cache=False))
        uncached = _run(dims, profile, tiling_cache=False)
        cut = 100 * (1 - cold / _tiling_us(uncached))
        gain = 100 * (uncached.time_us / _run(dims, profile).time_us - 1)
        size_ops = sum(kernel.info.ge_shape for kernel in captured_llama(*dims).kernels)
        rows.append((name, dims[1], cut, gain, size_ops))
    return rows
