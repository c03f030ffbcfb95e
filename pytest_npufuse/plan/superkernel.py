"""The SuperKernel planner: which kernels a scope fuses into which SuperKernel tasks, and what happens.

Rule (docs/feature-docs.md#superkernel-scopes): ops in a scope are scanned in program order; an unfusable op closes the
current segment, runs alone as an ordinary task, and a new segment starts after it. The same scope name used in
several places means the same scope; kernels outside any scope that stand between two uses also close
the current segment, so non-contiguous uses give separate segments of that one scope (they are counted
together in its ``segments``, but they are not reported as breaks, since the op in between was never in
the scope).

Then each scope's options apply (TorchAir's SuperKernel option table):
- ``strict-scope-check=bypass|abort``: a scope split by an unfusable op (communication ops are not
  checked) writes a plog WARNING and gets no SuperKernel (``bypassed``), or an ERROR and fails the
  compilation (``aborted``).
- The SuperKernel launches on the largest block dim of its sub-kernels, unless ``debug-aic-num`` /
  ``debug-aiv-num`` force it (ratios 1:0, 0:1, 1:1, 1:2 only, capped by the hardware, ``limit_core_num``
  and that original count).
- A sub-kernel that uses SyncAll on fewer cores than the SuperKernel hangs the device unless
  ``feed-sync-all=1`` inserts SyncAll on the idle cores (at a cost the simulator charges).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from .. import cost
from ..errors import OptionsError, OptionsWarning, ScopeError, ScopeIgnoredWarning
from ..ir.program import Kernel, Program
from ..target.profile import HardwareProfile
from ..vocabulary import Engine, Mode
from .options import ParserPath, SuperKernelOptions, parse_options
from .streams import StreamPlan, stream_plan
from .tasks import LogRecord, Plan, ScopeBreak, ScopeOutcome, ScopePlan, Segment, Task, Variant, between_tasks

# debug-aic-num : debug-aiv-num ratio -> SuperKernel kernel type (TorchAir option table, docs/sources.md#torchair-2-4).
_DEBUG_RATIOS = {(1, 0): "MIX_AIC_1_0", (0, 1): "MIX_AIV_1_0", (1, 1): "MIX_AIC_1_1", (1, 2): "MIX_AIC_1_2"}


def _stream_of(kernel: Kernel, multistream: bool) -> tuple[str, int]:
    """The stream tag and priority a kernel runs on: its ``npu_stream_switch`` tag, or the default."""
    if multistream and kernel.annotations.stream is not None:
        return kernel.annotations.stream, kernel.annotations.stream_priority
    return "default", 0


def _kernel_task(kernel: Kernel, profile: HardwareProfile, multistream: bool = False) -> Task:
    stream, priority = _stream_of(kernel, multistream)
    return Task(kernel.name, (kernel.name,), stream, cost.block_dim(kernel, profile), kernel.info.engine, priority=priority)


def _natural_kernel_type(kernels: Sequence[Kernel]) -> str:
    """The widest core mix among the sub-kernels: Cube and Vector together launch as MIX_AIC_1_2."""
    engines = {kernel.info.engine for kernel in kernels}
    if "cube" in engines:
        return "MIX_AIC_1_2" if engines - {"cube"} else "MIX_AIC_1_0"
    return "MIX_AIV_1_0"


def _segment(scope: str, kernels: Sequence[Kernel], program: Program, profile: HardwareProfile) -> Segment:
    """Name the SuperKernel as CANN does: GE node ``sk_<scope>_start_<first>_end_<last>`` and kernel
    ``te_superkernel_<hash>``, the names users grep for in plog."""
    name = f"sk_{scope}_start_{kernels[0].name}_end_{kernels[-1].name}"
    digest = hashlib.sha256("|".join([name, *(k.op_type for k in kernels)]).encode()).hexdigest()
    dims = tuple(cost.block_dim(kernel, profile) for kernel in kernels)
    return Segment(
        scope, tuple(k.name for k in kernels), name, f"te_superkernel_{digest}", max(dims), _natural_kernel_type(kernels),
        dims, _internal_reads(kernels, program),
    )


def _internal_reads(kernels: Sequence[Kernel], program: Program) -> tuple[tuple[int, ...], ...]:
    """For each sub-kernel, the positions of earlier sub-kernels that wrote memory it reads (views
    resolved to the memory they share)."""
    storage = program.storage
    writer: dict[str, int] = {}
    reads = []
    for position, kernel in enumerate(kernels):
        written = {writer[owner] for name in kernel.inputs if (owner := storage(name)) in writer}
        reads.append(tuple(sorted(written)))
        for name in kernel.outputs:
            writer[storage(name)] = position
    return tuple(reads)


def _unsupported_reason(profile: HardwareProfile, dynamic: bool) -> str:
    if not profile.superkernel_supported:
        return f"SuperKernel is not supported on {profile.product} (profile '{profile.name}')"
    if dynamic:
        return "SuperKernel works only with static shapes (dynamic=False)"
    return ""


def _ignored_reason(kernels: Sequence[Kernel], mode: str, aclgraph_options: str | None) -> str:
    """Why TorchAir would not even read this scope in ``mode`` ('' when it does).

    ``torchair.scope.super_kernel`` is a GE attribute, read only in max-autotune; the native
    ``torch.npu.super_kernel_scope_begin/end`` markers are read only by the aclgraph modes, and only
    with SuperKernel optimisation switched on (``aclgraph_options`` is then its options text; a check's
    options for the scope switch it on for that scope, as the backend's options would).
    """
    if not kernels[0].annotations.sk_native:
        if mode == Mode.MAX_AUTOTUNE:
            return ""
        return (
            f"TorchAir ignores torchair.scope.super_kernel in {mode} mode: SuperKernel scopes work only in "
            "max-autotune mode (in npugraph_ex use torch.npu.super_kernel_scope_begin/end); the options are not checked"
        )
    if not Mode(mode).aclgraph:
        return f"torch.npu.super_kernel_scope_begin/end take effect only in npugraph_ex or reduce-overhead mode, not {mode}"
    if aclgraph_options is None:
        return (
            "SuperKernel optimisation is off: pass options={'static_kernel_compile': True, 'super_kernel_optimize': "
            "True} to the npugraph_ex backend (CompilerConfig: experimental_config.aclgraph._aclnn_static_shape_kernel "
            "and _super_kernel_optimize); in npufuse.check or compare, the scope's options turn it on for that scope "
            "(@pytest.mark.superkernel(scope, options=\"\"), compare(..., options={scope: \"\"}))"
        )
    return ""


def _warn_ignored(ignored: Mapping[str, str], mode: str) -> None:
    """One warning per graph for the scopes an aclgraph mode ignores, as a user on the device would
    otherwise only notice by the missing speed-up."""
    if ignored and Mode(mode).aclgraph:
        names = ", ".join(sorted(ignored))
        warnings.warn(
            f"SuperKernel scope(s) {names} ignored in {mode} mode: {next(iter(ignored.values()))}.",
            ScopeIgnoredWarning,
            stacklevel=4,
        )


def _segment_scopes(program: Program, profile: HardwareProfile) -> tuple[dict[str, list[Segment]], dict[str, list[ScopeBreak]]]:
    segments: dict[str, list[Segment]] = {name: [] for name in program.superkernel_scopes()}
    breaks: dict[str, list[ScopeBreak]] = {name: [] for name in segments}
    run: list[Kernel] = []

    def close() -> None:
        if run:
            scope = run[0].annotations.sk_scope
            segments[scope].append(_segment(scope, run, program, profile))
            run.clear()

    for kernel in program.kernels:
        scope = kernel.annotations.sk_scope
        if scope is None or (run and run[0].annotations.sk_scope != scope):
            close()
        if scope is None:
            continue
        if kernel.info.fusable:
            run.append(kernel)
        else:
            close()
            info = kernel.info
            breaks[scope].append(
                ScopeBreak(kernel.op_type, kernel.name, kernel.source, info.engine, info.unfusable or "", info.why_unfusable)
            )
    close()
    return segments, breaks


def _scope_members(program: Program) -> dict[str, list[Kernel]]:
    """The kernels of each SuperKernel scope in program order, scopes in order of first use."""
    members: dict[str, list[Kernel]] = {}
    for kernel in program.kernels:
        scope = kernel.annotations.sk_scope
        if scope is not None:
            members.setdefault(scope, []).append(kernel)
    return members


def _scope_options(
    members: Mapping[str, Sequence[Kernel]], overrides: Mapping[str, str], aclgraph_options: str | None
) -> dict[str, SuperKernelOptions]:
    """The parsed options of each scope: the marker's override, else what the code passed (on the
    scope's first kernel), or for a native npugraph_ex scope the backend's SuperKernel options, read by
    CANN's aclgraph parser."""
    parsed = {}
    for scope, kernels in members.items():
        native = kernels[0].annotations.sk_native
        text = overrides.get(scope, (aclgraph_options or "") if native else kernels[0].annotations.sk_options)
        parsed[scope] = parse_options(scope, text, ParserPath.ACLGRAPH if native else ParserPath.GE)
    return parsed


def _debug_cores(options: SuperKernelOptions) -> tuple[str, int] | None:
    """The forced kernel type and block dim from debug-aic-num / debug-aiv-num, or None if unset."""
    if "debug-aic-num" not in options.values and "debug-aiv-num" not in options.values:
        return None
    aic, aiv = int(options.get("debug-aic-num") or 0), int(options.get("debug-aiv-num") or 0)
    if aic and aiv:
        ratio, dim = ((1, aiv // aic) if aiv % aic == 0 else None), aic
    else:
        ratio, dim = ((1, 0) if aic else (0, 1) if aiv else None), aic or aiv
    if ratio not in _DEBUG_RATIOS:
        raise OptionsError(
            f"super_kernel scope '{options.scope}': debug-aic-num={aic}, debug-aiv-num={aiv} is not an allowed ratio; "
            "use aic:aiv = 1:0, 0:1, 1:1 or 1:2 with a positive count (e.g. debug-aic-num=12:debug-aiv-num=24).",
            op="super_kernel", argument="debug-aic-num"
        )
    return _DEBUG_RATIOS[ratio], dim


def _debug_cap(segment: Segment, kernels: Sequence[Kernel], forced: tuple[str, int], profile: HardwareProfile) -> Segment:
    """Apply debug core counts, refusing values the documentation forbids: above the hardware, above
    ``limit_core_num``, or above the count the SuperKernel would launch with anyway."""
    kernel_type, dim = forced
    vector_only = kernel_type == "MIX_AIV_1_0"
    limits = [k.annotations.vectorcore_limit if vector_only else k.annotations.aicore_limit for k in kernels]
    caps = [
        (profile.aiv if vector_only else profile.aic, f"the {profile.name} hardware's {'AIV' if vector_only else 'AIC'} count"),
        (min((limit for limit in limits if limit), default=dim), "the scope's limit_core_num"),
        (segment.block_dim, f"the block dim {segment.name} launches with"),
    ]
    for cap, what in caps:
        if dim > cap:
            option = "debug-aiv-num" if vector_only else "debug-aic-num"
            raise OptionsError(
                f"super_kernel scope '{segment.scope}': {option}={dim} exceeds {what}, {cap}; use at most {cap}.",
                op="super_kernel", argument=option, bound=cap
            )
    return replace(segment, block_dim=dim, kernel_type=kernel_type)


def _check_dcci(options: SuperKernelOptions, kernels: Sequence[Kernel]) -> None:
    """dcci-* options name op types (GE) or regular expressions over them (aclgraph, e.g. ``.*``); one
    that matches no kernel of the scope can do nothing, which is worth a warning."""
    present = {kernel.info.kernel_type for kernel in kernels}
    regex = options.path is ParserPath.ACLGRAPH
    for option in ("dcci-before-kernel-start", "dcci-after-kernel-end", "dcci-disable-on-kernel"):
        for op in filter(None, options.get(option).split(",")):
            if not any(re.search(op, kind) if regex else op == kind for kind in present):
                warnings.warn(
                    f"super_kernel scope '{options.scope}': {option} names {op}, which is not a kernel in the scope "
                    f"(kernels: {', '.join(sorted(present))}); it has no effect.",
                    OptionsWarning,
                    stacklevel=3,
                )


def _hang(segment: Segment, kernels: Sequence[Kernel]) -> str:
    """Why the SuperKernel would hang (a SyncAll sub-kernel on fewer cores, no feed-sync-all), or ''."""
    for kernel, dim in zip(kernels, segment.kernel_dims):
        if kernel.info.sync_all and dim < segment.block_dim and not segment.feed_sync_all:
            return (
                f"modeled hang: sub-kernel {kernel.name} ({kernel.op_type}) calls SyncAll on block dim {dim}, but "
                f"SuperKernel {segment.name} launches {segment.block_dim} cores, so {segment.block_dim - dim} cores "
                "never reach the barrier. Fix: add feed-sync-all=1 to the scope options, or launch "
                f"{kernel.name} on {segment.block_dim} cores."
            )
    return ""


def _flushes(options: SuperKernelOptions, kernels: Sequence[Kernel]) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which sub-kernels get a data-cache flush before and after them: the op types the
    ``dcci-before-kernel-start`` / ``dcci-after-kernel-end`` options name, and after every one with
    ``debug-dcci-all=1``."""
    before = set(filter(None, options.get("dcci-before-kernel-start").split(",")))
    after = set(filter(None, options.get("dcci-after-kernel-end").split(",")))
    every = options.get("debug-dcci-all") == "1"
    types = [kernel.info.kernel_type for kernel in kernels]
    return tuple(t in before for t in types), tuple(every or t in after for t in types)


def _finish_segment(segment: Segment, options: SuperKernelOptions, program: Program, profile: HardwareProfile) -> Segment:
    kernels = [program.kernel(name) for name in segment.kernels]
    flush_before, flush_after = _flushes(options, kernels)
    segment = replace(
        segment,
        feed_sync_all=options.get("feed-sync-all") == "1",
        options=options,
        early_start=options.get("early-start") != "0",
        preload=options.get("preload-code") != "none",
        code_copies=int(options.get("split-mode")),
        flush_before=flush_before if any(flush_before) else (),
        flush_after=flush_after if any(flush_after) else (),
    )
    forced = _debug_cores(options)
    return _debug_cap(segment, kernels, forced, profile) if forced else segment


def _strict_failure(scope: str, options: SuperKernelOptions, breaks: Sequence[ScopeBreak]) -> tuple[ScopeOutcome, LogRecord] | None:
    """The strict-scope-check verdict for a split scope; communication ops are not checked (CANN)."""
    mode = options.get("strict-scope-check")
    checked = [b for b in breaks if b.engine != Engine.COMM]
    if not mode or not checked:
        return None
    sites = ", ".join(b.describe() for b in checked)
    if mode == "bypass":
        message = f"scope {scope} is split by unfusable op(s) {sites}; bypass: no SuperKernel is generated for it"
        return ScopeOutcome.BYPASSED, LogRecord("WARNING", "super_kernel_scope", message)
    message = f"scope {scope} is split by unfusable op(s) {sites}; abort: compilation stops"
    return ScopeOutcome.ABORTED, LogRecord("ERROR", "super_kernel_scope", message)


@dataclass(frozen=True)
class _ScopeResult:
    plan: ScopePlan
    log: LogRecord | None = None


def _stream_fusion(
    segment: Segment, options: SuperKernelOptions, streams: StreamPlan, profile: HardwareProfile, kernels: Sequence[Kernel]
) -> Segment:
    """Sub-kernels from several streams in one SuperKernel (TorchAir's ``stream-fusion`` option;
    docs/feature-docs.md#superkernel-scopes).

    With ``stream-fusion=0`` (the default) a SuperKernel takes ops of at most two streams
    (``profile.superkernel_max_streams``), kept in issue order, and the streams must be linked by an
    event, else the scope is an error. With ``=1`` the ops may sit on one or more streams, each a lane
    of the SuperKernel, so a Cube and a Vector sub-kernel on different streams overlap. The seed advises
    against ``=1`` in a MicroBatch layout (streams bound to their own cores with ``limit_core_num``):
    that is a warning.
    """
    lanes = tuple(streams.kernel_stream[name] for name in segment.kernels)
    tags = sorted(set(lanes))
    if len(tags) == 1:
        return segment
    fused = options.get("stream-fusion") == "1"
    if not fused and len(tags) > profile.superkernel_max_streams:
        raise ScopeError(
            f"super_kernel scope '{segment.scope}' has ops on {len(tags)} streams ({', '.join(tags)}) in "
            f"{segment.name}; with stream-fusion=0 a SuperKernel takes at most {profile.superkernel_max_streams}. "
            "Set stream-fusion=1 (one or more streams), split the scope or move ops to fewer streams."
        )
    inside = set(segment.kernels)
    linked = any(
        edge.record_after in inside and edge.wait_before in inside
        and streams.kernel_stream[edge.record_after] != streams.kernel_stream[edge.wait_before]
        for edge in streams.edges
    )
    if not fused and not linked:
        raise ScopeError(
            f"super_kernel scope '{segment.scope}' has ops on streams {', '.join(tags)} in {segment.name} with no "
            "event between them; with stream-fusion=0 add an event (npu_wait_tensor or record/wait) between the "
            "streams, or set stream-fusion=1 to let the SuperKernel run them in parallel."
        )
    if not fused:
        return segment
    _warn_micro_batch(segment, tags, [k for k in kernels if k.name in inside])
    return replace(segment, lanes=lanes, early_start=False)


def _warn_micro_batch(segment: Segment, tags: Sequence[str], kernels: Sequence[Kernel]) -> None:
    """stream-fusion=1 over in-graph streams that are bound to their own cores (``limit_core_num`` on the
    streams: a MicroBatch layout). The seed: there each stream owns its cores, so express the streams
    with the in-graph multi-stream API (max-autotune) and do not also set stream-fusion=1."""
    bound = sorted({k.stream for k in kernels if k.annotations.aicore_limit is not None or k.annotations.vectorcore_limit is not None})
    if len(bound) < 2:
        return
    warnings.warn(
        f"super_kernel scope '{segment.scope}' sets stream-fusion=1 over streams {', '.join(tags)}, and streams "
        f"{', '.join(bound)} are bound to their own cores with limit_core_num (a MicroBatch layout). TorchAir "
        "advises against stream-fusion=1 there: keep the in-graph streams (npu_stream_switch) and drop "
        "stream-fusion=1 from the scope's options.",
        OptionsWarning,
        stacklevel=4,
    )


def _plan_scope(
    scope: str,
    options: SuperKernelOptions,
    kernels: Sequence[Kernel],
    segments: Sequence[Segment],
    breaks: Sequence[ScopeBreak],
    program: Program,
    profile: HardwareProfile,
    streams: StreamPlan,
) -> _ScopeResult:
    _check_dcci(options, kernels)
    strict = _strict_failure(scope, options, breaks)
    if strict is not None:
        outcome, record = strict
        return _ScopeResult(ScopePlan(scope, options.text, outcome, (), tuple(breaks), record.message), record)
    formed = tuple(
        _stream_fusion(_finish_segment(segment, options, program, profile), options, streams, profile, kernels)
        for segment in segments
    )
    hangs = [reason for seg in formed if (reason := _hang(seg, [program.kernel(n) for n in seg.kernels]))]
    if hangs:
        return _ScopeResult(ScopePlan(scope, options.text, ScopeOutcome.HANG, formed, tuple(breaks), hangs[0]))
    outcome, reason = (ScopeOutcome.FUSED, "") if formed else (ScopeOutcome.UNFUSED, "no kernel in the scope is fusable")
    return _ScopeResult(ScopePlan(scope, options.text, outcome, formed, tuple(breaks), reason, _splits(scope, formed, program)))


def _splits(scope: str, segments: Sequence[Segment], program: Program) -> tuple[str, ...]:
    """What separates consecutive segments besides the scope's own unfusable ops: an inner scope (a
    nested ``super_kernel`` of another name or ``None``) or ops outside the scope between two uses of
    its name. Each is named by its first kernel, so a segment count that is off says why."""
    index = {kernel.name: kernel.index for kernel in program.kernels}
    splits = []
    for before, after in zip(segments, segments[1:]):
        between = program.kernels[index[before.kernels[-1]] + 1 : index[after.kernels[0]]]
        other = next((kernel for kernel in between if kernel.annotations.sk_scope != scope), None)
        if other is None:
            continue
        at = f" at {other.source}" if other.source else ""
        inner = other.annotations.sk_scope
        where = f"inner super_kernel({inner!r})" if inner is not None else "ops outside the scope (or in super_kernel(None))"
        splits.append(f"{where}, from {other.op_type} ({other.name}{at})")
    return tuple(splits)


def check_core_limits(program: Program, profile: HardwareProfile) -> None:
    """``limit_core_num(aic, aiv)`` takes values in [1, the target's cores] (TorchAir's documented range,
    docs/sources.md#torchair-3-1); a larger cap would silently mean no cap at all."""
    for kernel in program.kernels:
        limits = kernel.annotations
        for name, value, cores, kind in (
            ("op_aicore_num", limits.aicore_limit, profile.aic, "AI Cube"),
            ("op_vectorcore_num", limits.vectorcore_limit, profile.aiv, "AI Vector"),
        ):
            if value is not None and not 1 <= value <= cores:
                raise ScopeError(
                    f"limit_core_num({limits.aicore_limit}, {limits.vectorcore_limit}) around {kernel.op_type} at "
                    f"{kernel.source or 'the model'}: {name}={value} is outside 1..{cores}, the {kind} cores of "
                    f"{profile.name}; pass a count in that range.", op="limit_core_num"
                )


def plan_variant(
    program: Program,
    profile: HardwareProfile,
    *,
    variant: str,
    mode: str = Mode.MAX_AUTOTUNE,
    dynamic: bool = False,
    options: Mapping[str, str] | None = None,
    multistream: bool = True,
    aclgraph_options: str | None = None,
) -> Plan:
    """Plan BASELINE (every kernel its own task, scopes ignored) or VARIANT (scopes honoured).

    With ``multistream=False`` the VARIANT ignores stream switches and keeps every kernel on the
    default stream, which isolates the SuperKernel effect. ``aclgraph_options`` is the SuperKernel
    options text of an aclgraph mode with SuperKernel optimisation on (None: off). Scopes the mode does
    not read are ``unsupported`` with the reason, their options unchecked, with one warning.
    """
    check_core_limits(program, profile)
    if variant == Variant.BASELINE:
        return Plan(variant, mode, tuple(_kernel_task(kernel, profile) for kernel in program.kernels), ())
    streams = stream_plan(program, mode, multistream=multistream)
    members = _scope_members(program)
    overrides = options or {}
    ignored = {
        s: why for s, kernels in members.items()
        if (why := _ignored_reason(kernels, mode, overrides[s] if s in overrides else aclgraph_options))
    }
    _warn_ignored(ignored, mode)
    unread = {s: ScopePlan(s, members[s][0].annotations.sk_options, "unsupported", (), (), why) for s, why in ignored.items()}
    scope_options = _scope_options({s: k for s, k in members.items() if s not in ignored}, options or {}, aclgraph_options)
    notes = tuple(LogRecord("INFO", "super_kernel_scope", note) for o in scope_options.values() for note in o.notes)
    reason = _unsupported_reason(profile, dynamic)
    if reason:
        unread.update({s: ScopePlan(s, o.text, ScopeOutcome.UNSUPPORTED, (), (), reason) for s, o in scope_options.items()})
        scopes = tuple(unread[s] for s in members)
        tasks = fused_tasks(program, {}, profile, multistream)
        return Plan(variant, mode, tasks, scopes, notes, syncs=between_tasks(streams.edges, tasks), streams=streams)
    segments, breaks = _segment_scopes(program, profile)
    results = {
        s: _plan_scope(s, o, members[s], segments[s], breaks[s], program, profile, streams) for s, o in scope_options.items()
    }
    scopes = tuple(results[s].plan if s in results else unread[s] for s in members)
    log = notes + tuple(result.log for result in results.values() if result.log is not None)
    failure = next((f"{s.scope}: {s.reason}" for s in scopes if s.outcome in (ScopeOutcome.ABORTED, ScopeOutcome.HANG)), None)
    fused = {s.scope: list(s.segments) for s in scopes if s.outcome in (ScopeOutcome.FUSED, ScopeOutcome.HANG)}
    tasks = fused_tasks(program, fused, profile, multistream)
    return Plan(variant, mode, tasks, scopes, log, failure, between_tasks(streams.edges, tasks), streams)


def segment_scopes(program: Program, profile: HardwareProfile) -> Mapping[str, list[Segment]]:
    """The SuperKernel segments every scope of ``program`` forms (no checks of modes or options)."""
    return _segment_scopes(program, profile)[0]


def fused_tasks(
    program: Program, segments: Mapping[str, list[Segment]], profile: HardwareProfile, multistream: bool = False
) -> tuple[Task, ...]:
    """Issue order: each segment takes the place of its first sub-kernel, on that kernel's stream.
    With ``multistream`` every task runs on the stream its scope annotations name."""
    owner = {kernel: seg for segs in segments.values() for seg in segs for kernel in seg.kernels}
    tasks: list[Task] = []
    for kernel in program.kernels:
        segment = owner.get(kernel.name)
        if segment is None:
            tasks.append(_kernel_task(kernel, profile, multistream))
        elif segment.kernels[0] == kernel.name:
            engines = {program.kernel(name).info.engine for name in segment.kernels}
            engine = "cube" if "cube" in engines else "vector"
            stream, priority = _stream_of(kernel, multistream)
            tasks.append(Task(segment.te_name, segment.kernels, stream, segment.block_dim, engine, segment, priority))
    return tuple(tasks)
