"""The ``torch.compile`` backend that models an Ascend NPU.

Like any Dynamo backend it receives an FX graph and example inputs and returns a callable. Ours lowers
the graph to aten with AOTAutograd, builds the program IR, plans it (BASELINE or VARIANT), simulates the
plan on the target's profile once (shapes are captured static; ``dynamic=True`` models the host
scheduling a dynamic-shape graph would get), and returns a callable that computes the outputs
on the CPU in the plan's order. Each compiled graph is kept on the backend for the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified

from . import fusion
from .capture import build_program
from .catalog import OpCatalog, load_catalog
from .errors import NotModeledError
from .execute import run_graph
from .hardware import HardwareProfile
from .plog import write_plog
from .program import Program
from .host import HostConfig
from .sanitize import SanitizerReport, sanitize
from .simulate import RunReport, simulate
from .torchair.configs.compiler_config import CompilerConfig


@dataclass(frozen=True)
class CompiledGraph:
    """One captured graph with its plan and modeled run; calling it computes the outputs."""

    gm: torch.fx.GraphModule
    program: Program
    plan: fusion.Plan
    run: RunReport
    plog_path: str | None = None
    sanitizer: SanitizerReport | None = None

    def __call__(self, *args: Any) -> list[Any]:
        """The outputs a device would produce: kernels in issue order (always a legal order for the
        data), where each read the sanitizer found racing sees poisoned memory."""
        stale = self.sanitizer.poisoned_reads() if self.sanitizer is not None else {}
        return run_graph(self.gm, self.program, args, stale)


@dataclass
class NpuBackend:
    """A Dynamo backend bound to one target, mode and variant (scopes honoured or ignored)."""

    config: CompilerConfig
    profile: HardwareProfile
    variant: str = fusion.VARIANT
    catalog: OpCatalog = field(default_factory=load_catalog)
    options: Mapping[str, str] = field(default_factory=dict)
    multistream: bool = True
    mode: str | None = None
    dynamic: bool = False
    host: HostConfig = field(default_factory=HostConfig)
    graphs: list[CompiledGraph] = field(default_factory=list)

    @property
    def run_mode(self) -> str:
        """The mode runs are modeled in: ``mode`` when set (``"eager"``), else the config's."""
        return self.mode or self.config.run_mode

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in example_inputs):
            raise NotModeledError(
                "training graphs are not modeled; run the model under torch.no_grad() or torch.inference_mode()."
            )
        # Input mutations stay in the graph (as copy_ kernels), where a device would run them.
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=self._compile_aten, keep_inference_input_mutations=True
        )

    def _compile_aten(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledGraph:
        program = build_program(gm, self.catalog)
        plan = fusion.plan(
            program,
            self.profile,
            variant=self.variant,
            mode=self.run_mode,
            dynamic=self.dynamic,
            options=self.options,
            multistream=self.multistream and not self.config.ge_config.enable_single_stream.value,
            aclgraph_options=self.config.superkernel_options(),
        )
        plog = write_plog(plan.log)
        checked = sanitize(program, plan.streams) if plan.streams is not None else None
        if checked is not None and checked.deadlock is not None and plan.failure is None:
            plan = replace(plan, failure=checked.deadlock.describe())
        run = simulate(program, plan, self.profile, dynamic=self.dynamic, host=self.host)
        compiled = CompiledGraph(gm, program, plan, run, plog and str(plog), checked)
        self.graphs.append(compiled)
        return compiled

    def __repr__(self) -> str:
        return f"NpuBackend({self.profile.name}, {self.run_mode}, {self.variant})"
