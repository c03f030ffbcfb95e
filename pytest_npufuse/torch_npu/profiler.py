"""``torch_npu.profiler.profile`` (and ``torch_npu.npu.profile``): the modeled device's profile of the
compiled graphs a script runs inside the block.

Method three of docs/feature-docs.md#scope-analysis (profiler-driven) profiles the model, reads which module takes the
most time (attention, MoE, FFN, the rest) and scopes that module first::

    with torch_npu.profiler.profile() as prof:          # or torch_npu.npu.profile(use_npu=True)
        output = model(input_ids)
    print(prof.module_table())                          # per nn.Module: inclusive and self device time
    print(prof.key_averages().table())                  # per op type, msprof's op_statistic.csv

Every call of a graph the library's backend compiled (``torchair.get_npu_backend()``,
``backend="npugraph_ex"``, ``npufuse.compile``) inside the block adds that graph's modeled run, once per
call and end to end; a training step's backward counts in the op table's backward column. Ops run eagerly
outside any compiled graph are not device work the model prices, so they are not in the tables. The
arguments torch_npu's profiler takes for host-side data (``record_shapes``, ``profile_memory``,
``with_stack``, ``with_flops``, ``with_modules``) are accepted and leave the device tables as they are;
``schedule`` and ``experimental_config`` are refused (their step windows and AI Core metrics are not modeled).
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Iterable

from ..errors import ArgumentError, NotModeledError
from ..ir.program import Program
from ..report.attribution import Attribution, attribute_calls
from ..session import SessionKey, current_session
from ..simulate.timeline import RunReport

__all__ = ["profile", "ProfilerActivity"]


class ProfilerActivity(enum.Enum):
    """What a profile collects (torch_npu: framework-side events, and CANN / NPU data)."""

    CPU = "CPU"
    NPU = "NPU"


IN_PROGRESS: SessionKey[list["profile"]] = SessionKey("profiles in progress", list)


def _in_progress() -> list["profile"]:
    return current_session()[IN_PROGRESS]


def record_graph_call(program: Program, run: RunReport) -> None:
    """A compiled graph ran once on the modeled device: every profile in progress in the session records it."""
    for prof in _in_progress():
        prof.calls.append((program, run))


class _OpTable:
    """What ``key_averages()`` returns: the op-type table, as text with ``table()``."""

    def __init__(self, attribution: Attribution) -> None:
        self.rows = attribution.op_types
        self.step = attribution.step

    def table(self, sort_by: str | None = None, row_limit: int = -1) -> str:
        """msprof's op_statistic columns, slowest op type first (``sort_by`` is accepted for torch's
        signature: the table is always by total device time)."""
        rows = self.rows if row_limit < 0 else self.rows[:row_limit]
        header = f"{'OP Type':<28}{'Core Type':<16}{'Count':>7}{'Total(us)':>14}{'Avg(us)':>12}{'Ratio(%)':>10}"
        if self.step:
            header += f"{'Backward(us)':>14}"
        lines = [header]
        for row in rows:
            line = (f"{row.op_type:<28}{row.core_type:<16}{row.count:>7}{row.total_us:>14.3f}{row.avg_us:>12.3f}"
                    f"{row.ratio_pct:>10.2f}")
            lines.append(line + (f"{row.backward_us:>14.3f}" if self.step else ""))
        return "\n".join(lines)


class profile:  # noqa: N801 - torch_npu's name
    """A profile of the compiled graphs run inside the block (see the module's docstring)."""

    def __init__(
        self,
        activities: Iterable[ProfilerActivity] | None = None,
        schedule: Callable[[int], Any] | None = None,
        on_trace_ready: Callable[["profile"], Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Any = None,
        use_cuda: bool | None = None,
        *,
        use_npu: bool = True,
    ) -> None:
        for name, value in (("schedule", schedule), ("experimental_config", experimental_config)):
            if value is not None:
                raise NotModeledError(
                    f"torch_npu.profiler.profile({name}=...) is not modeled: the modeled profile covers every "
                    f"compiled graph run inside the block; drop {name}= and profile only the steps you want.",
                    op="torch_npu.profiler.profile", argument=name
                )
        chosen = set(activities) if activities is not None else set(ProfilerActivity)
        if not chosen <= set(ProfilerActivity):
            raise ArgumentError(
                f"activities= takes torch_npu.profiler.ProfilerActivity members, not {sorted(map(repr, chosen))}."
            )
        self.device = use_npu and ProfilerActivity.NPU in chosen
        self.on_trace_ready = on_trace_ready
        self.calls: list[tuple[Program, RunReport]] = []
        self.steps = 0

    def start(self) -> None:
        in_progress = _in_progress()
        if self.device and self not in in_progress:
            in_progress.append(self)

    def stop(self) -> None:
        in_progress = _in_progress()
        if self in in_progress:
            in_progress.remove(self)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def step(self) -> None:
        """The end of one training step (counted; the tables cover every step of the block)."""
        self.steps += 1

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def attribution(self) -> Attribution:
        """Per module, per op type and the overlap shares of the recorded calls."""
        if not self.calls:
            reason = ("NPU activity was not collected (activities= without ProfilerActivity.NPU, or use_npu=False)"
                      if not self.device else "no graph compiled for the NPU ran inside the block")
            raise ArgumentError(
                f"the profile has no device data: {reason}. Run the model compiled with the NPU backend "
                "(torch.compile(model, backend=torchair.get_npu_backend())) "
                "inside `with torch_npu.profiler.profile():`.",
                op="torch_npu.profiler.profile", argument="activities" if not self.device else None
            )
        return attribute_calls(self.calls)

    def key_averages(self) -> _OpTable:
        return _OpTable(self.attribution())

    def module_table(self, row_limit: int = -1) -> str:
        """Per ``nn.Module`` call path: kernels, inclusive and self device time and share, the model first
        (docs/feature-docs.md#scope-analysis: "which module is the bottleneck")."""
        rows = self.attribution().modules
        rows = rows if row_limit < 0 else rows[:row_limit]
        lines = [f"{'Module':<48}{'Type':<24}{'Kernels':>8}{'Total(us)':>14}{'Self(us)':>12}{'Ratio(%)':>10}"]
        lines += [
            f"{'  ' * row.depth + row.label:<48}{row.type:<24}{row.kernels:>8}{row.total_us:>14.3f}"
            f"{row.self_us:>12.3f}{row.ratio_pct:>10.2f}"
            for row in rows
        ]
        return "\n".join(lines)
