"""L2 residency: which bytes a kernel reads from Ascend's L2 instead of HBM.

An A2/A3 die has a large L2 (192 MiB on the 24-core parts, 96 MiB on 910B4). Two cases keep a kernel's
inputs there:

- **the whole step fits**: when every buffer a program touches fits in the share of L2 that holds data
  (``[efficiency] l2_activation_share``), repeated runs find even its weights in L2 (a kernel benchmarked
  in a loop, a small model);
- **producer to consumer**: a tensor a recent kernel wrote is still in L2 when a later kernel reads it,
  as long as less than that share of L2 was written in between.

A byte read from L2 costs what the L2 path costs relative to HBM: the kernel's HBM bytes are lowered by
those bytes times (1 - HBM rate / L2 rate), where the L2 rate is every AI Core's ``core_l2_bytes_per_cycle``.
The result is the "effective" HBM bytes the cost rules and the HBM-sharing pool see.
"""

from __future__ import annotations

from .. import cost
from ..ir.program import Program
from ..target.profile import HardwareProfile


def effective_bytes(program: Program, profile: HardwareProfile) -> dict[str, int]:
    """Kernel name -> HBM bytes once L2-resident inputs are priced at the L2 rate (kernels with none
    are absent)."""
    capacity = profile.l2_mib * 2**20 * profile.l2_activation_share
    l2_rate = profile.core_l2_bytes_per_cycle * profile.vector_mhz * (profile.aic + profile.aiv) / 1000.0
    saving = max(0.0, 1.0 - profile.hbm_gbps / l2_rate)
    everything = program.footprint <= capacity
    written = 0
    produced_at: dict[str, int] = {}
    result: dict[str, int] = {}
    streams_hbm: dict[int, bool] = {}
    for kernel, reads in zip(program.kernels, program.reads):
        fresh = 0
        for storage, nbytes in reads:
            if everything:
                fresh += nbytes
                continue
            at = produced_at.get(storage)
            if at is not None and written - at <= capacity:
                fresh += nbytes
        info = kernel.info
        hbm = streams_hbm.get(id(info))
        if hbm is None:
            hbm = streams_hbm[id(info)] = cost.reads_hbm(info)
        if fresh and kernel.bytes and hbm:
            result[kernel.name] = max(0, round(kernel.bytes - min(fresh, kernel.bytes) * saving))
        for spec, name in zip(kernel.output_specs, kernel.outputs):
            produced_at[name] = written
            written += spec.nbytes
    return result
