"""Scripts written for a real NPU, run on the CPU model: ``python -m pytest_npufuse run SCRIPT``.

The script runs unchanged under the shim (:mod:`pytest_npufuse.shim`): its ``torchair.get_npu_backend()``
and ``torch.compile(backend="npugraph_ex")`` calls get backends that model the chosen target, and each
graph they compile is remembered. After the script's own output comes a summary of every modeled graph:
its mode, SuperKernel scopes and streams, and its modeled time beside the same graph with its scopes
ignored (the BASELINE plan of the same program, priced on the same profile).
"""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path
from typing import Sequence, TextIO

from torch._dynamo.exc import TorchDynamoException

from ..errors import NpufuseError, OpArgumentError, OpTypeError
from ..frontend.dynamo import root_cause
from ..frontend.meta import traced_on_meta
from ..pipeline.backend import ModeledRun, modeled_run
from ..pipeline.graph import CompiledGraph
from ..plan.tasks import ScopePlan, broken_by
from ..target.resolve import profile_of
from ..target.userconfig import load_user_config


def _scope_line(scope: ScopePlan) -> str:
    detail = f"{len(scope.segments)} segment(s), block dim {scope.block_dim}" if scope.segments else scope.reason
    breaks = f"; split by {broken_by(scope.breaks)}" if scope.breaks else ""
    return f"    SuperKernel scope {scope.scope!r}: {scope.outcome} ({detail}){breaks}"


def _graph_lines(number: int, graph: CompiledGraph) -> list[str]:
    """One graph: its modeled time against the same program with scopes ignored, its scopes and streams."""
    baseline = graph.scopes_ignored()
    run = graph.run
    streams = graph.plan.streams.streams if graph.plan.streams is not None else ("default",)
    timing = (
        f"{run.time_us:.1f} us modeled ({run.bound}-bound), {baseline.time_us:.1f} us with scopes ignored, "
        f"speedup {baseline.time_us / run.time_us:.3f}x" if run.failure is None else f"does not finish: {run.failure}"
    )
    lines = [
        f"  graph {number}: {graph.plan.mode}, {len(graph.program.kernels)} kernels in {run.tasks} tasks on "
        f"{len(streams)} stream(s); {timing}"
    ]
    if traced_on_meta(graph.gm):
        lines.append("    numerics not computed (timing only: the model is on the meta device)")
    lines += [_scope_line(scope) for scope in graph.plan.scopes]
    races = graph.sanitizer.races if graph.sanitizer is not None else ()
    if races:
        lines.append(f"    {len(races)} cross-stream race(s): {races[0].headline()}")
    return lines


def summary(run: ModeledRun) -> list[str]:
    graphs = run.graphs()
    head = f"npufuse run: {len(graphs)} graph(s) modeled on {run.profile.name} ({run.profile.product})"
    lines = [head]
    for number, graph in enumerate(graphs, 1):
        lines += _graph_lines(number, graph)
    if not graphs:
        lines.append("  no graph was compiled with torchair.get_npu_backend() or backend=\"npugraph_ex\"")
    return lines


def run_script(
    script: Path, argv: Sequence[str], target: str, out: TextIO, pyproject: Path | None = None
) -> int:
    """Run ``script`` as ``__main__`` under the shim, then print the summary; 0 when the script ends
    normally, its exit status when it calls ``sys.exit`` (a message given to ``sys.exit`` is printed
    to stderr with status 1, as Python does), 1 when it raises. Python processes the script starts
    (``multiprocessing`` spawn, ``subprocess``) get the shim and the target too. ``target`` is looked up
    among ``pyproject``'s own targets first (a calibrated one), in the script and in those processes."""
    from ..shim import install_shims
    from ..shim.children import shim_in_children

    profile = profile_of(target, load_user_config(pyproject))
    state = install_shims()
    saved_argv = sys.argv
    sys.argv = [str(script), *argv]
    status = 0
    try:
        with modeled_run(profile) as run, shim_in_children(target, pyproject):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except Exception as exc:  # noqa: BLE001 - reported below, then the summary
        error = _reportable(exc)
        if error is None:  # the script's own error is shown as Python would
            traceback.print_exc()
        else:
            text = error.diagnosis
            print(f"npufuse run: {script}: {_error_name(error)}: {text}{_user_line(exc, script, text)}", file=out)
        status = 1
    finally:
        sys.argv = saved_argv
    out.flush()
    print(f"npufuse run: {state.describe()}; processes the script starts get the shim too (their graphs are "
          "modeled there, not summarised here)", file=out)
    for line in summary(run):
        print(line, file=out)
    return status


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives, as the interpreter computes it: None is 0, an int is itself,
    anything else is printed to stderr and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    sys.stderr.flush()
    return 1


def _reportable(exc: BaseException) -> BaseException | None:
    """The error to show as one line at the user's line, or None for the script's own error: an npufuse
    error (also when Dynamo wrapped it while compiling a graph or tracing an op's fake kernel), among them
    the argument errors of a torch_npu op or TorchAir API (:class:`OpArgumentError`, :class:`OpTypeError`)."""
    if isinstance(exc, TorchDynamoException):
        exc = root_cause(exc)
    return exc if isinstance(exc, NpufuseError) else None


def _error_name(error: BaseException) -> str:
    """An argument error is named as the real torch_npu or TorchAir raises it (ValueError, TypeError)."""
    if isinstance(error, OpArgumentError):
        return "ValueError"
    if isinstance(error, OpTypeError):
        return "TypeError"
    return type(error).__name__


def _user_line(exc: BaseException, script: Path, text: str) -> str:
    """Where in the user's script the error was raised (its innermost frame in the script), unless the
    error's ``text`` names it."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == script.resolve()]
    if not frames or f"{frames[-1].filename}:" in text:  # the error names its own line in the script
        return ""
    # A compiled function's frame shows its ``def`` line; the call that ran it says more.
    frame = frames[-2] if len(frames) > 1 and (frames[-1].line or "").startswith("def ") else frames[-1]
    return f" (at {frame.filename}:{frame.lineno}: {frame.line})"
