"""Roofline cost of one kernel on a hardware profile: its block dim and its on-core time.

A kernel is as slow as the slower of its arithmetic (flops at the engine's peak for its dtype, scaled by
the share of cores it launches on) and its memory traffic (bytes at HBM bandwidth, or at the per-core
DDR path when few cores launch). Efficiencies come from the profile.
"""

from __future__ import annotations

import math

from .hardware import HardwareProfile
from .program import Kernel


def core_cap(kernel: Kernel, profile: HardwareProfile) -> int:
    """Cores the kernel may launch on: the engine's count, lowered by ``limit_core_num`` (which caps AI
    Cube and AI Vector cores only)."""
    engine = kernel.info.engine
    cap = profile.cores(engine)
    limits = kernel.annotations
    limit = limits.aicore_limit if engine == "cube" else limits.vectorcore_limit if engine == "vector" else None
    return min(cap, limit) if limit else cap


def block_dim(kernel: Kernel, profile: HardwareProfile) -> int:
    """Launch core count by the catalog rule, as ``Block Dim`` in kernel_details.csv would show it.
    An AI CPU kernel spreads over every AI CPU core."""
    rule = kernel.info.block_dim
    cap = core_cap(kernel, profile)
    if kernel.info.engine == "aicpu":
        wanted = cap
    elif isinstance(rule, int):
        wanted = rule
    elif rule == "cube_tiles":
        out = kernel.output_specs[0].shape if kernel.output_specs else (1,)
        rows = math.prod(out[:-1]) if len(out) > 1 else 1
        cols = out[-1] if out else 1
        wanted = math.ceil(rows / profile.cube_tile_m) * math.ceil(cols / profile.cube_tile_n)
    elif rule == "vector_bytes":
        specs = kernel.output_specs
        nbytes = specs[0].nbytes if len(specs) == 1 else sum(spec.nbytes for spec in specs)
        wanted = math.ceil(nbytes / profile.vector_block_bytes)
    else:
        wanted = 1
    return max(1, min(wanted, cap))


def _peak_tflops(kernel: Kernel, profile: HardwareProfile) -> float:
    if kernel.info.engine == "cube":
        table = profile.cube_tflops
        return table.get(kernel.compute_dtype, table.get("float32", max(table.values())))
    table = profile.vector_tflops
    return table.get(kernel.compute_dtype, table.get("default", min(table.values())))


def body_us(kernel: Kernel, dim: int, profile: HardwareProfile) -> float:
    """On-core time of the kernel body (without dispatch or head) when launched on ``dim`` cores,
    including its SyncAll barrier when it uses one."""
    engine = kernel.info.engine
    if engine == "host":
        return 0.0
    if engine == "comm":
        return profile.comm_latency_us + kernel.bytes / (profile.comm_gbps * profile.comm_efficiency * 1e3)
    if engine == "aicpu":
        compute_us = kernel.flops / (profile.aicpu_gflops_per_core * 1e3 * dim)
        return max(compute_us, kernel.bytes / (profile.aicpu_bytes_per_us_per_core * dim))
    sync_us = profile.overhead_us["sync_all"] if kernel.info.sync_all else 0.0
    return sync_us + _core_body_us(kernel, dim, profile)


def _core_body_us(kernel: Kernel, dim: int, profile: HardwareProfile) -> float:
    """Roofline time of an AI Core (Cube or Vector) kernel body."""
    cores = profile.cores(kernel.info.engine)
    share = dim / cores
    compute_us = 0.0
    if kernel.flops:
        flops_per_us = _peak_tflops(kernel, profile) * 1e6 * profile.compute_efficiency * share
        compute_us = kernel.flops / flops_per_us
    clock_mhz = profile.cube_mhz if kernel.info.engine == "cube" else profile.vector_mhz
    core_path_gbps = profile.core_ddr_bytes_per_cycle * clock_mhz * dim / 1000.0
    bandwidth_gbps = min(profile.hbm_gbps, core_path_gbps) * profile.memory_efficiency
    memory_us = kernel.bytes / (bandwidth_gbps * 1e3)
    return max(compute_us, memory_us)
