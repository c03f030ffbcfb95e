"""A training step's device memory, modeled from its graphs: what stays resident and the peak the step
reaches. Ascend training runs are often bound by device memory before they are bound by time.

- resident for the whole step: the parameters and the optimizer's state;
- gradients: written by the backward, read by the optimizer step;
- activations kept for the backward: the forward's outputs the backward graph takes as inputs
  (AOTAutograd's saved tensors), live from the forward until their last read in the backward;
- each graph's own intermediates, live from the kernel that writes them to their last reader in the
  issue order (a view shares its base's memory; a graph's outputs live to its end).

A case whose resident tensors alone exceed the die's device memory (the target's ``[memory] hbm_gib``)
could not run there: :func:`check_fits` refuses it rather than price it.

The peak is the resident memory plus the largest of the forward's live memory (its intermediates and
the activations it keeps), the backward's (activations freed at their last read, gradients written, its
intermediates) and the optimizer's (gradients and its intermediates). Not modeled: the caching
allocator's rounding and fragmentation, and op workspaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import DeviceMemoryError
from ..ir.program import Program
from ..target.profile import HardwareProfile
from ..vocabulary import Phase

_GB = 1024**3


@dataclass(frozen=True)
class StepMemory:
    """Bytes of one training step on the device (see the module docstring); ``live`` is each graph's
    largest live memory beyond the resident parameters and optimizer state, by phase."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    live: Mapping[str, int]

    @property
    def peak(self) -> int:
        return self.parameters + self.optimizer_state + max(self.live.values(), default=0)

    @property
    def peak_phase(self) -> str:
        return max(self.live, key=lambda phase: self.live[phase]) if self.live else ""

    def to_json(self) -> dict[str, Any]:
        """Bytes by part, the peak and the phase it is reached in, and each phase's live bytes."""
        return {
            "parameters": self.parameters, "gradients": self.gradients, "optimizer_state": self.optimizer_state,
            "activations": self.activations, "peak": self.peak, "peak_phase": self.peak_phase,
            "live": dict(self.live),
        }

    def describe(self) -> str:
        return (
            f"peak {self.peak / _GB:.3f} GB (in the {self.peak_phase}): parameters {self.parameters / _GB:.3f} GB, "
            f"gradients {self.gradients / _GB:.3f} GB, optimizer state {self.optimizer_state / _GB:.3f} GB, "
            f"activations kept for the backward {self.activations / _GB:.3f} GB"
        )


def live_peak(program: Program, resident: frozenset[str]) -> int:
    """The largest number of bytes live at once over the program's kernels: every storage from the
    kernel that writes it (a graph input not in ``resident``: from the start) to its last reader (a
    graph output: to the end)."""
    end = len(program.kernels)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for name in program.inputs:
        storage = program.storage(name) if name in program.buffers else None
        if storage is not None and storage not in resident:
            first.setdefault(storage, 0)
    for kernel in program.kernels:
        for name in kernel.outputs:
            first.setdefault(program.storage(name), kernel.index)
        for name in kernel.inputs:
            last[program.storage(name)] = kernel.index
    for name in program.outputs:
        if name is not None and name in program.buffers:
            last[program.storage(name)] = end
    change = [0] * (end + 2)
    for storage, start in first.items():
        nbytes = program.buffers[storage].spec.nbytes
        change[start] += nbytes
        change[last.get(storage, start) + 1] -= nbytes
    peak = live = 0
    for delta in change:
        live += delta
        peak = max(peak, live)
    return peak


def saved_activations(forward: Program, backward: Program) -> frozenset[str]:
    """The backward's inputs that are the forward's outputs (AOTAutograd names them alike), except the
    forward's own inputs it passes on (``primals_*``: parameters and user inputs)."""
    kept = {name for name in forward.outputs if name is not None} - set(forward.inputs)
    return frozenset(name for name in backward.inputs if name in kept and name in backward.buffers)


def step_memory(
    programs: Sequence[Program], parameters: int, gradients: int, optimizer_state: int
) -> StepMemory:
    """The memory of a step whose graphs are ``programs`` (forward first); the resident sizes come from
    the model and optimizer the step ran on."""
    by_phase = {program.phase: program for program in programs}
    forward, backward = by_phase.get(Phase.FORWARD), by_phase.get(Phase.BACKWARD)
    saved = saved_activations(forward, backward) if forward is not None and backward is not None else frozenset()
    activations = sum(backward.buffers[name].spec.nbytes for name in saved) if backward is not None else 0
    live: dict[str, int] = {}
    for program in programs:
        inputs = frozenset(program.storage(n) for n in program.inputs if n in program.buffers)
        if program.phase == Phase.BACKWARD:
            live[str(program.phase)] = live_peak(program, inputs - {program.storage(n) for n in saved})
        elif program.phase == Phase.OPTIMIZER:
            live[str(program.phase)] = gradients + live_peak(program, inputs)
        else:
            live[str(program.phase)] = live_peak(program, inputs)
    return StepMemory(parameters, gradients, optimizer_state, activations, live)


def check_fits(sizes: Mapping[str, int], profile: HardwareProfile, what: str) -> None:
    """Refuse a case whose resident tensors ``sizes`` (bytes by name) exceed one die of ``profile``: its
    numbers would price a run that could not start. ``what`` says what the sizes are, for the message."""
    capacity = int(profile.hbm_gib * _GB)
    total = sum(sizes.values())
    if total <= capacity:
        return
    largest = max(sizes, key=lambda name: sizes[name])
    raise DeviceMemoryError(
        f"the case's {what} take {total / _GB:,.1f} GiB, but one {profile.name} die has {profile.hbm_gib:g} GiB of "
        f"device memory (its [memory] hbm_gib, docs/sources.md#hw-1-1); the largest is {largest} "
        f"({sizes[largest] / _GB:,.1f} GiB). Check the config the model was built from (a parameter count or "
        "hidden size off by a power of ten), or check a slice of it: fewer layers, a smaller batch, or one "
        "rank's shard of its weights.",
        argument="model", entry=largest, bound=capacity,
    )


def check_peak(program: Program, resident: Mapping[str, int], profile: HardwareProfile) -> None:
    """Refuse a case whose resident tensors (``resident``, bytes by name) and the intermediates live at
    the program's peak exceed one die of ``profile`` (an intermediate of 2**60 elements is no more
    modelable than a parameter of that size)."""
    inputs = frozenset(program.storage(name) for name in program.inputs if name in program.buffers)
    owned = [b for b in program.buffers.values() if b.alias_of is None and b.name not in inputs]
    if not owned:
        return
    largest = max(owned, key=lambda buffer: buffer.spec.nbytes)
    label = f"the intermediates live at the peak (largest: {largest.user_name}, {largest.spec.nbytes / _GB:,.1f} GiB)"
    check_fits({**resident, label: live_peak(program, inputs)}, profile, "tensors at the peak of the run")
