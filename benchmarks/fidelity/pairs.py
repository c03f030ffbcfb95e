"""Step, layer and before/after rows: decoder steps of the rows' models, and the published samples.

A row missing what its workload needs (a model config no source read gives, shapes the source calls
"typical") raises :class:`NotModeled` with the reason, so the table lists it as a miss instead of a guess.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.timeline import simulate

from . import fragments, models, serving
from .rows import Profiles, Row

# Rows that give no deployment: the Omni-Infer A3 decode instance (1D32 = 32 chips, 64 dies, ~50
# sequences per die, EP64) that the Omni-Infer blog row states, for the vendor figures of the same stack,
# running Omni-Infer's decode kernels (benchmarks/fidelity/fused.py).
ASSUMED_DIES = 64
ASSUMED_OMNI_SEQUENCES = 50
ASSUMED_FRAMEWORK = "omni-infer"
# DeepSeek-family rows naming no quantisation run W8A8, as Omni-Infer's and cann-recipes' A3 configs do.
ASSUMED_DEEPSEEK_QUANT = "w8a8"


class NotModeled(Exception):
    """The row's workload cannot be built from what is known; the message says what is missing."""


def _config(row: Row) -> dict[str, Any]:
    config = models.model_config(row)
    if config is None:
        raise NotModeled(f"no public config of {row.model.get('name', row.model.get('family'))} was available offline")
    return dict(config)


def _text(row: Row) -> str:
    return " ".join(str(row.get(key, "")) for key in ("what", "note", "where"))


def _deployment(row: Row, config, prefill: bool = False, **changes) -> models.Deployment:
    text = _text(row)
    fields = dict(row.fields)
    if not (fields.get("dies") or fields.get("chips") or fields.get("tp") or fields.get("ep")):
        fields.update(dies=ASSUMED_DIES, batch=fields.get("batch") or ASSUMED_DIES * ASSUMED_OMNI_SEQUENCES)
        fields.setdefault("framework", ASSUMED_FRAMEWORK)
    if "quant" not in fields and config.get("family") in ("deepseek_v3", "deepseek_v4"):
        fields["quant"] = ASSUMED_DEEPSEEK_QUANT
    row = replace(row, fields=fields)
    stated = {
        "superkernel": "layer" if "SuperKernel" in text and "no SK" not in text else "",
        "shared_stream": "shared-expert stream" in text,
    }
    return models.deployment_of(row, config, prefill, **{**stated, **changes})


def _run(
    row: Row,
    profiles: Profiles,
    deployment: models.Deployment,
    mode: str,
    variant: str = Variant.VARIANT,
    rebound: frozenset[str] = frozenset(),
):
    profile = profiles.for_row(row, comm_ranks=max(2, deployment.ep, deployment.attn_tp))
    return models.step_report(row, profile, deployment, mode, variant, rebound)


def step_value(row: Row, profiles: Profiles) -> float:
    """A step row in ms: one step, or per output token (``tpot``: a step over the tokens it yields; a
    served run's mean TPOT, :func:`served_tpot_ms`)."""
    config = _config(row)
    prefill = row.get("metric") == "prefill"
    deployment = _deployment(row, config, prefill)
    engines = row.get("dp") or max(1, (row.get("dies") or 1) // row.get("tp", 1))
    served = serving.serving_of(row.fields, engines)
    if served is not None:
        return served_tpot_ms(row, profiles, deployment, served)
    report = _run(row, profiles, deployment, prefill_mode(row, ()) if prefill else row.get("mode"))
    per_token = row.get("tokens_per_step", 1.0) if row.get("metric") == "tpot" else 1.0
    return report.time_us / 1000 / per_token


def served_tpot_ms(row: Row, profiles: Profiles, deployment: models.Deployment, served: serving.Serving) -> float:
    """A served run's mean TPOT (:mod:`.serving`) from this model's decode steps (at one sequence and at
    the most that can run together, in between on the line through them) and its prefill of one prompt
    of the row's input length, on the row's deployment and mode. Where the stack captures graphs for a
    few batch sizes only (:func:`_capture_sizes`), a larger decode batch, and a prompt of more tokens
    than the largest size, run eager; a captured decode graph has its attention rebound by the host
    after each replay where the row's graph mode says so (:func:`serving.rebound_ops`)."""
    if not row.get("seq"):
        raise NotModeled("a served run needs its prompts' input length (seq), which the row does not give")
    if row.get("cudagraph_mode") == "PIECEWISE":
        raise NotModeled("piecewise decode graphs (attention run eagerly between replayed pieces) are not modeled")
    mode = row.get("mode")
    full = int(min(served.prompts, served.max_seqs))
    rebound = serving.rebound_ops(row.get("cudagraph_mode"))

    def decode_ms(batch: int, step_mode: str = mode) -> float:
        step = replace(deployment, sequences=batch, tokens=batch * (1 + deployment.drafts))
        return _ms(_run(row, profiles, step, step_mode, rebound=rebound if step_mode == mode else frozenset()))

    sizes = _capture_sizes(row, served, deployment)
    prompt = replace(deployment, prefill=True, sequences=1, tokens=row.get("seq"), drafts=0)
    prefill_ms = _ms(_run(row, profiles, prompt, prefill_mode(row, sizes)))
    if not sizes or sizes[-1] >= full:
        return serving.serve(served, serving.linear_steps(decode_ms(1), decode_ms(full), full), prefill_ms).tpot_ms
    top = sizes[-1]
    graph = serving.linear_steps(decode_ms(1), decode_ms(top), top)
    eager_line = serving.linear_steps(decode_ms(top + 1, "eager"), decode_ms(full, "eager"), full - top)
    steps = serving.graph_or_eager_steps(sizes, graph, lambda batch: eager_line(batch - top))
    return serving.serve(served, steps, prefill_ms).tpot_ms


def prefill_mode(row: Row, sizes: tuple[int, ...]) -> str:
    """The mode a prompt of the row's input length prefills in: eager on a stack that compiles only its
    decode (:attr:`Row.eager_prefill`); where graphs are captured for ``sizes`` tokens only, a longer
    prompt has none and runs eager (vLLM's cudagraph dispatcher gives a batch of more tokens than the
    largest capture size no graph); else the row's mode."""
    if row.eager_prefill or (sizes and row.get("seq") > sizes[-1]):
        return "eager"
    return row.get("mode")


def _capture_sizes(row: Row, served: serving.Serving, deployment: models.Deployment) -> tuple[int, ...]:
    """The decode batch sizes a vLLM-Ascend aclgraph row captures by default (:func:`serving.vllm_capture_sizes`);
    () where every batch replays a graph of its own (other stacks and modes, or no stated max_num_seqs)."""
    if row.get("mode") != "aclgraph" or not row.on_vllm_ascend:
        return ()
    if math.isinf(served.max_seqs):
        return ()
    return serving.vllm_capture_sizes(int(served.max_seqs), 1 + deployment.drafts, served.max_batched_tokens)


def task_wait_per_layer_us(row: Row, profiles: Profiles) -> float:
    """Profiles' "Task wait": idle time on the main stream between one task's end and the next's start,
    per layer, without SuperKernel."""
    config = _config(row)
    deployment = _deployment(row, config, sequences=row.get("batch"), tokens=row.get("batch"))
    report = _run(row, profiles, deployment, row.get("mode"), Variant.BASELINE)
    rows = sorted((k for k in report.kernels if k.parent is None and k.stream == "default"), key=lambda k: k.start_us)
    idle = sum(max(0.0, later.start_us - earlier.end_us) for earlier, later in zip(rows, rows[1:]))
    return idle / config["layers"]


def _ms(report) -> float:
    return report.time_us / 1000


def superkernel_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    if row.model.get("family") == "synthetic_moe_sample":
        return _superkernel_sample(row, profiles)
    config = _config(row)
    scope = "moe" if "MoE block" in row.get("what", "") else "layer"
    plain = _deployment(row, config, superkernel="")
    before = _run(row, profiles, plain, row.get("mode"), Variant.BASELINE)
    after = _run(row, profiles, replace(plain, superkernel=scope), row.get("mode"))
    return _ms(before), _ms(after)


def multistream_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    config = _config(row)
    if "micro-batch" in row.get("what", ""):
        plain = _deployment(row, config, prefill=True, superkernel="", shared_stream=False)
        before = _run(row, profiles, plain, row.get("mode"), Variant.BASELINE)
        after = _run(row, profiles, replace(plain, microbatches=2), row.get("mode"))
        return _ms(before), _ms(after)
    plain = _deployment(row, config, superkernel="", shared_stream=False)
    before = _run(row, profiles, plain, row.get("mode"), Variant.BASELINE)
    after = _run(row, profiles, replace(plain, shared_stream=True), row.get("mode"))
    return _ms(before), _ms(after)


def graph_mode_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    if row.get("metric") == "fragment":
        return fragments.fragment_pair(row, profiles)
    config = _config(row)
    deployment = _deployment(row, config)
    before = _run(row, profiles, deployment, row.get("mode_before"), Variant.BASELINE)
    after = _run(row, profiles, deployment, row.get("mode_after"), Variant.BASELINE)
    if row.get("metric") == "kernel_sum":
        return _kernel_ms(before), _kernel_ms(after)
    return _ms(before), _ms(after)


def _kernel_ms(report) -> float:
    """Summed device kernel time without communication kernels (the row's "non-Hcom kernel time")."""
    return sum(k.duration_us for k in report.kernels if k.parent is None and k.engine != "comm") / 1000


def _superkernel_sample(row: Row, profiles: Profiles) -> tuple[float, float]:
    """The graph-autofusion MoE sample: six scopes of MoeGatingTopK, GroupedMatmul, DequantSwigluQuant,
    GroupedMatmul, each between unfusable ops (a DynamicQuant splits the router from the experts, so each
    scope gives a MIX_AIV and a MIX_AIC SuperKernel, as the sample's table shows). The sample's shapes are
    tiny fp32 ones its script defines; these are sized so the unfused ops take about the published
    per-call times. Op time summed as op_statistic does (all ops, or the fused ones)."""
    profile = profiles.for_row(row)
    program = _moe_sample()
    fused_types = ("GroupedMatmul", "MoeGatingTopK", "DequantSwigluQuant")
    only_fused = row.id.endswith("fused-ops")

    def op_time(variant: str) -> float:
        plan = models.plan_of(("gaf-sk-sample", variant), program, profile, variant=variant)
        report = simulate(program, plan, profile)
        return sum(
            k.duration_us
            for k in report.kernels
            if k.parent is None
            and (not only_fused or k.op_type == "npufuse::superkernel" or k.kernel_type in fused_types)
        )

    return op_time(Variant.BASELINE), op_time(Variant.VARIANT)


@functools.cache
def _moe_sample():
    """The program of the graph-autofusion MoE sample (:func:`_superkernel_sample`), built once."""
    b = ProgramBuilder(models.catalog())
    x = b.input("x", (64, 7168))
    w_up = b.input("w_up", (4, 7168, 256), "int8")
    w_down = b.input("w_down", (4, 128, 7168), "int8")
    wide = b.input("wide", (512, 7168))
    for scope in range(6):
        b.op("aten::clone", [wide], (512, 7168))  # the sample's Transpose
        b.op("aten::add", [x, x], (64, 7168))
        b.op("npu::npu_moe_gating_top_k", [x], (64, 8), scope=f"moe{scope}")
        q = b.op("npu::npu_dynamic_quant", [x], (64, 7168), "int8")
        up = b.op("npu::npu_grouped_matmul", [q, w_up], (256, 256), scope=f"moe{scope}")
        act = b.op("npu::npu_dequant_swiglu_quant", [up], (256, 128), "int8", scope=f"moe{scope}")
        b.op("npu::npu_grouped_matmul", [act, w_down], (256, 7168), scope=f"moe{scope}")
    return b.build()
