"""Matching a profile's kernels to the captured model's: by op type, launch order and input shapes.

Each profiled step (``Step Id``; the whole file when it has none, as many runs of the model as its
length holds) is aligned with the model's device kernels in launch order as two sequences of (op type, input shapes) keys, by the longest matching blocks
(:class:`difflib.SequenceMatcher`, deterministic). A profiled kernel is matched only to a model kernel
of the same op type and the same input shapes at the aligned position; anything else is listed as
unmatched with the reason (another op type there, other shapes, no kernel left in the model), never
guessed. When the profile has no ``Input Shapes`` column, op type and order alone decide.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

from ..errors import CalibrationError
from ..ir.program import Kernel, Program
from .msprof import MeasuredProfile, ProfiledKernel, Shape

# Below this share of the profile's kernels matched, the profile is of another model (or other shapes).
MIN_MATCHED = 0.5


@dataclass(frozen=True)
class Matched:
    """A profiled kernel and the model kernel it measures."""

    profiled: ProfiledKernel
    kernel: Kernel


@dataclass(frozen=True)
class Unmatched:
    """A profiled kernel no model kernel could be matched to, and why."""

    profiled: ProfiledKernel
    reason: str

    def describe(self) -> str:
        return f"{self.profiled.describe()}: {self.reason}"


@dataclass(frozen=True)
class Matching:
    """Every profiled kernel, matched or not, and the model kernels no profiled kernel measured."""

    matched: tuple[Matched, ...]
    unmatched: tuple[Unmatched, ...]
    unmeasured: tuple[Kernel, ...]


def device_kernels(program: Program) -> tuple[Kernel, ...]:
    """The kernels a device profile shows, in launch order: host ops never reach the device."""
    return tuple(kernel for kernel in program.kernels if kernel.info.engine != "host")


def shapes_of(kernel: Kernel) -> tuple[Shape, ...]:
    return tuple(tuple(spec.shape) for spec in kernel.input_specs)


def _describe(kernel: Kernel) -> str:
    return f"{kernel.info.kernel_type} [" + "; ".join(",".join(map(str, s)) for s in shapes_of(kernel)) + "]"


def match(profile: MeasuredProfile, program: Program, model: str) -> Matching:
    """Match every step of ``profile`` to the device kernels of ``program``; ``model`` names the model
    in errors. A profile with fewer than half its kernels matched is of another model: an error."""
    kernels = device_kernels(program)
    if not kernels:
        raise CalibrationError(f"{model}: the captured model launches no device kernel; there is nothing to calibrate.")
    with_shapes = profile.has_shapes
    model_keys = [(k.info.kernel_type, shapes_of(k) if with_shapes else None) for k in kernels]
    matched: list[Matched] = []
    unmatched: list[Unmatched] = []
    measured: set[int] = set()
    for step in _steps(profile.kernels):
        step_keys = [(p.op_type, p.shapes if with_shapes else None) for p in step]
        runs = max(1, round(len(step) / len(kernels)))  # iterations profiled back to back without a Step Id
        blocks = difflib.SequenceMatcher(None, model_keys * runs, step_keys, autojunk=False).get_opcodes()
        for tag, m0, m1, p0, p1 in blocks:
            if tag == "equal":
                matched += [Matched(p, kernels[m % len(kernels)]) for p, m in zip(step[p0:p1], range(m0, m1))]
                measured.update(m % len(kernels) for m in range(m0, m1))
                continue
            for offset, profiled in enumerate(step[p0:p1]):
                there = kernels[(m0 + offset) % len(kernels)] if m0 + offset < m1 else None
                unmatched.append(Unmatched(profiled, _reason(profiled, there)))
    result = Matching(tuple(matched), tuple(unmatched), tuple(k for i, k in enumerate(kernels) if i not in measured))
    _check_same_model(result, profile, model)
    return result


def _steps(kernels: Sequence[ProfiledKernel]) -> list[list[ProfiledKernel]]:
    """The profiled kernels by step, in the order the steps first appear."""
    steps: dict[str, list[ProfiledKernel]] = {}
    for kernel in kernels:
        steps.setdefault(kernel.step, []).append(kernel)
    return list(steps.values())


def _reason(profiled: ProfiledKernel, there: Kernel | None) -> str:
    if there is None:
        return "the model launches no kernel at this position (the profile has a kernel more here)"
    if there.info.kernel_type != profiled.op_type:
        same = profiled.shapes is not None and profiled.shapes == shapes_of(there)
        hint = (f"; if it is the same op, give its catalog entry kernel_type = \"{profiled.op_type}\" in "
                "[tool.npufuse.ops]") if same else ""
        return f"the model's kernel at this position is {_describe(there)}{hint}"
    return f"the model's {profiled.op_type} at this position has other input shapes: {_describe(there)}"


def _check_same_model(result: Matching, profile: MeasuredProfile, model: str) -> None:
    total = len(result.matched) + len(result.unmatched)
    if len(result.matched) >= MIN_MATCHED * total:
        return
    first = result.unmatched[0]
    types = sorted({m.profiled.op_type for m in result.unmatched})
    raise CalibrationError(
        f"{profile.source}: only {len(result.matched)} of {total} profiled kernels match the kernels of {model}, so "
        f"this looks like a profile of another model (or of other shapes); first unmatched, {first.describe()}. "
        f"Unmatched op types: {', '.join(types[:8])}{', ...' if len(types) > 8 else ''}. Profile this model with the "
        "inputs FACTORY returns, or give the FACTORY of the model that was profiled.",
        file=str(profile.source)
    )
