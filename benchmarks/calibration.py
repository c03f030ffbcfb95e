"""Calibration: each published result beside the modeled one, from a small model of the published setting.

    PYTHONPATH=. python benchmarks/calibration.py

Every row builds the program its source describes (shapes per die, as far as the source gives them; the
rest is an assumption named in the row's builder), simulates it on the shipped a2/a3 profile and prints
published vs modeled and a verdict: within +-30%, or the mechanism the model still lacks. Rows marked
``ms`` compare an absolute modeled decode step with a published one. Sources (never Hunyuan/HY3,
LongCat or the vllm-ascend MLA side-stream PR, which are kept as an independent check):

- seed 002 (GE host scheduling), seed 003 (affinity ops);
- hicann/graph-autofusion ``super_kernel/examples/super_kernel_profiling/README.md`` (op_statistic);
- hicann/cann-learning-hub ``blogs/inference/superkernel_inference_acceleration/SuperKernel技术综述.md``
  ("learning hub": per-layer task wait, SuperKernel gain over 58 of 61 DeepSeek layers);
- hicann/cann-learning-hub ``blogs/inference/deepseek_r1_superpod_inference_optimization/...md``
  (Omni-Infer + CANN DeepSeek-R1 decode on A3, TPOT 50 -> 47 ms);
- hicann/cann-recipes-infer ``docs/models/deepseek_r1/deepseek_r1_decode_optimization.md`` (W8A8C8,
  64 chips, global batch 6144, MTP1 accepting 0.7: TPOT 44.9 ms);
- sgl-project/sgl-kernel-npu README (DeepEP-Ascend low-latency dispatch/combine, research hw §1.3);
- omni-infer ``docs/add_custom_model.md`` (SuperKernel ~2 ms, MoE multi-stream ~3 ms; research hw §4.3).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_npufuse.ir.events import Event  # noqa: E402
from pytest_npufuse.pipeline.synthetic import ProgramBuilder, plan_program  # noqa: E402
from pytest_npufuse.plan.tasks import Variant  # noqa: E402
from pytest_npufuse.simulate.host import HostConfig  # noqa: E402
from pytest_npufuse.simulate.timeline import simulate  # noqa: E402
from pytest_npufuse.target.profile import load_profile  # noqa: E402

A2 = load_profile("a2")
A3 = load_profile("a3")
LLAMA_LAYERS, LLAMA_HIDDEN, LLAMA_FFN = 32, 4096, 11008
SHAPE_OPS_PER_LAYER = 21  # seed 002: "650+" Pack/Gather/Concat ops over LLaMA2's 32 layers


@dataclass(frozen=True)
class Row:
    """One published number and the model's; ``lacks`` names the mechanism the model still lacks
    when the row misses; ``at_least`` marks a published lower bound."""

    name: str
    published: float
    modeled: float
    unit: str
    lacks: str = ""
    at_least: bool = False

    @property
    def within(self) -> bool:
        if self.at_least:
            return self.modeled >= self.published * 0.7
        return 0.7 <= self.modeled / self.published <= 1.3

    def line(self) -> str:
        if self.within:
            verdict = "meets the bound" if self.at_least else "within 30%"
        else:
            verdict = f"OFF by {100 * (self.modeled / self.published - 1):+.0f}%: lacks {self.lacks or '(unnamed)'}"
        return f"{self.name:<66} {self.published:>9.2f} {self.unit:<3}{self.modeled:>9.2f} {self.unit:<3} {verdict}"


# ------------------------------------------------------------------ seed 002: LLaMA2 host scheduling


def llama2_host_scheduled(tokens: int = 1):
    """A LLaMA2-7B forward as GE host-schedules it with dynamic shapes: per layer ~20 device ops and a
    chain of small int64 shape ops (Pack, Gather, Concat) whose result a value-dependent op reads."""
    b = ProgramBuilder()
    x = b.input("x", (tokens, LLAMA_HIDDEN))
    wq = b.input("wq", (LLAMA_HIDDEN, LLAMA_HIDDEN))
    wf = b.input("wf", (LLAMA_HIDDEN, LLAMA_FFN))
    wd = b.input("wd", (LLAMA_FFN, LLAMA_HIDDEN))
    shape = b.input("shape", (4,), "int64")
    for _ in range(LLAMA_LAYERS):
        s = shape
        for index in range(SHAPE_OPS_PER_LAYER):
            op = ("aten::stack", "aten::index_select", "aten::cat")[index % 3]
            s = b.op(op, [s, shape], (4,), "int64")
        b.op("aten::_local_scalar_dense", [s], (), "int64")
        h = b.op("npu::npu_rms_norm", [x], (tokens, LLAMA_HIDDEN))
        q, k, v = (b.op("aten::mm", [h, wq], (tokens, LLAMA_HIDDEN)) for _ in range(3))
        for t in (q, k):
            for op in ("aten::mul", "aten::neg", "aten::mul", "aten::add"):
                t = b.op(op, [t, t], (tokens, LLAMA_HIDDEN))
        a = b.op("aten::bmm", [q, k], (32, tokens, 1024))
        a = b.op("aten::_softmax", [a], (32, tokens, 1024))
        a = b.op("aten::bmm", [a, v], (tokens, LLAMA_HIDDEN))
        x = b.op("aten::add", [x, b.op("aten::mm", [a, wq], (tokens, LLAMA_HIDDEN))], (tokens, LLAMA_HIDDEN))
        h = b.op("npu::npu_rms_norm", [x], (tokens, LLAMA_HIDDEN))
        g = b.op("aten::silu", [b.op("aten::mm", [h, wf], (tokens, LLAMA_FFN))], (tokens, LLAMA_FFN))
        u = b.op("aten::mul", [g, b.op("aten::mm", [h, wf], (tokens, LLAMA_FFN))], (tokens, LLAMA_FFN))
        x = b.op("aten::add", [x, b.op("aten::mm", [u, wd], (tokens, LLAMA_HIDDEN))], (tokens, LLAMA_HIDDEN))
    return b.build()


def host_run(program, profile, **host):
    plan = plan_program(program, profile, variant=Variant.BASELINE)
    return simulate(program, plan, profile, dynamic=True, host=HostConfig(**{"threads": 1, **host}))


def tiling_time(report) -> float:
    return sum(s.end_us - s.start_us for s in report.host if s.name in ("Tiling", "TilingCacheHit"))


def seed_002_rows() -> list[Row]:
    program = llama2_host_scheduled()
    # The seed's cache cut is measured within runs that start cold: the first iteration.
    first = host_run(program, A2, warm_tiling_cache=False)
    cut = 100 * (1 - tiling_time(first) / tiling_time(host_run(program, A2, tiling_cache=False)))
    default = host_run(program, A2)
    on_device = host_run(program, A2, small_shape_on_host=False)
    gain = 100 * (1 - default.time_us / on_device.time_us)
    return [
        Row("tiling cache cuts host tiling time, LLaMA2 (seed 002: '>50%')", 50.0, cut, "%", at_least=True),
        Row("small-shape ops on host: LLaMA2 1.062 -> 1.009 s (seed 002)", 100 * (1 - 1.009 / 1.062), gain, "%",
            lacks="the seed's run is prefill plus many decode steps whose mix it does not give; the model runs one "
                  "decode step, where the saved launches weigh more"),
    ]


# ------------------------------------------------------------------ seed 003: same work, different forms


def one_hot_sum_vs_scatter(profile) -> tuple[float, float]:
    """Seed 003's router mask: one_hot(indices, E).sum(1) against zeros().scatter_(), as the device
    kernels their aten decompositions give (an int64 one-hot, so Cast and ReduceSum run on AI CPU).
    Setting (an assumption; the seed gives none): 16k tokens, top-8 of 64 experts."""
    tokens, top_k, experts = 16384, 8, 64
    b = ProgramBuilder()
    idx = b.input("idx", (tokens, top_k), "int64")
    arange = b.op("aten::arange", [], (experts,), "int64")
    eq = b.op("aten::eq", [idx, arange], (tokens, top_k, experts), "bool")
    cast = b.op("aten::_to_copy", [eq], (tokens, top_k, experts), "int64")
    b.op("aten::sum", [cast], (tokens, experts), "int64")
    one_hot = b.build()
    b = ProgramBuilder()
    idx = b.input("idx", (tokens, top_k), "int64")
    zeros = b.op("aten::zeros", [], (tokens, experts))
    b.op("aten::scatter", [zeros, idx], (tokens, experts))
    return kernel_ms(one_hot, profile), kernel_ms(b.build(), profile)


def kernel_ms(program, profile) -> float:
    report = simulate(program, plan_program(program, profile, variant=Variant.BASELINE), profile)
    return sum(k.duration_us for k in report.kernels) / 1000


def form_pair(build_slow, build_fast, profile=A2) -> float:
    """Modeled time ratio of two forms of the same work (seed 003 gives the direction, not a number)."""
    return kernel_ms(build_slow(), profile) / kernel_ms(build_fast(), profile)


def _gather_elements():
    b = ProgramBuilder()
    logit, target = b.input("logit", (65536, 1024), "float32"), b.input("target", (65536, 16), "int64")
    b.op("aten::gather", [logit, target], (65536, 16), "float32")
    return b.build()


def _index_select():
    b = ProgramBuilder()
    alpha, target = b.input("alpha", (1024,), "float32"), b.input("target", (1048576,), "int64")
    b.op("aten::index_select", [alpha, target], (1048576,), "float32")
    return b.build()


def _bmm_b11():
    b = ProgramBuilder()
    a, w = b.input("a", (4096, 1, 1024)), b.input("w", (4096, 1024, 1))
    b.op("aten::bmm", [a, w], (4096, 1, 1))
    return b.build()


def _mm_b1():
    b = ProgramBuilder()
    a, w = b.input("a", (4096, 1024)), b.input("w", (1024, 1))
    b.op("aten::mm", [a, w], (4096, 1))
    return b.build()


def _index_put():
    b = ProgramBuilder()
    table, idx, values = b.input("t", (65536, 64)), b.input("i", (16384,), "int64"), b.input("v", (16384, 64))
    b.op("aten::index_put", [table, idx, values], (65536, 64))
    return b.build()


def _index_copy():
    b = ProgramBuilder()
    table, idx, values = b.input("t", (65536, 64)), b.input("i", (16384,), "int64"), b.input("v", (16384, 64))
    b.op("aten::index_copy", [table, idx, values], (65536, 64))
    return b.build()


def _linear(form):
    """nn.Linear on an input op-plugin casts to FRACTAL_NZ (K below 128, no multiple of 16), against
    torch.addmm(bias, x, w.t()): the same MatMul, priced by the call the user wrote."""
    def build():
        b = ProgramBuilder()
        bias, x, w_t = b.input("bias", (4096,)), b.input("x", (8192, 100)), b.input("w_t", (100, 4096))
        b.op("aten::addmm", [bias, x, w_t], (8192, 4096), form=form)
        return b.build()
    return build


def _repeat_interleave(form):
    """torch.repeat_interleave(x, 8) against x.unsqueeze(-1).expand(-1, 8).reshape(-1): Dynamo gives
    both as one copy of the expanded tensor; torch_npu runs the first as RepeatInterleave."""
    def build():
        b = ProgramBuilder()
        expanded = b.input("expanded", (1048576, 8))
        b.op("aten::clone", [expanded], (1048576, 8), form=form)
        return b.build()
    return build


def seed_003_rows() -> list[Row]:
    one_hot_ms, scatter_ms = one_hot_sum_vs_scatter(A2)
    return [Row("one_hot+sum / zeros+scatter time, 2.2 ms / 0.08 ms (seed 003)", 2.2 / 0.08, one_hot_ms / scatter_ms, "x",
                lacks="a measured AI CPU rate for int64 Cast/ReduceSum (the [aicpu] rates are estimates) and the "
                      "seed's shapes, which it does not give")]


def seed_003_forms() -> list[tuple[str, float]]:
    """Forms seed 003 calls slower without a number: the modeled ratio must be above 1."""
    return [
        ("GatherElements / GatherV2 (gather -> index_select)", form_pair(_gather_elements, _index_select)),
        ("BatchMatMul to [b,1,1] / MatMul to [b,1] (merge b into M)", form_pair(_bmm_b11, _mm_b1)),
        ("IndexPutV2 / InplaceIndexCopy (same rows written)", form_pair(_index_put, _index_copy)),
        ("nn.Linear / torch.addmm (input cast to FRACTAL_NZ)", form_pair(_linear("Linear"), _linear("addmm"))),
        ("repeat_interleave(x, 8) / unsqueeze+expand+reshape", form_pair(_repeat_interleave("repeat_interleave"),
                                                                      _repeat_interleave("reshape"))),
    ]


# ------------------------------------------------------------------ SuperKernel sample (graph-autofusion)


def superkernel_sample(profile):
    """The graph-autofusion MoE sample: six scopes of MoeGatingTopK, GroupedMatmul, DequantSwigluQuant,
    GroupedMatmul, each scope between unfusable ops (a DynamicQuant splits the router from the experts, so
    each scope gives a MIX_AIV and a MIX_AIC SuperKernel, as the sample's table shows). The sample gives
    no shapes: these are sized so the unfused ops take about the published per-call times (GMM ~10 us,
    MoeGatingTopK ~11 us, DequantSwigluQuant ~4 us). Op time summed as op_statistic does."""
    b = ProgramBuilder()
    x = b.input("x", (64, 7168))
    w_up = b.input("w_up", (4, 7168, 256), "int8")
    w_down = b.input("w_down", (4, 128, 7168), "int8")
    wide = b.input("wide", (512, 7168))
    for scope in range(6):
        b.op("aten::clone", [wide], (512, 7168))  # stands in for the sample's Transpose (~15 us a call)
        b.op("aten::add", [x, x], (64, 7168))
        b.op("npu::npu_moe_gating_top_k", [x], (64, 8), scope=f"moe{scope}")
        q = b.op("npu::npu_dynamic_quant", [x], (64, 7168), "int8")
        up = b.op("npu::npu_grouped_matmul", [q, w_up], (256, 256), scope=f"moe{scope}")
        act = b.op("npu::npu_dequant_swiglu_quant", [up], (256, 128), "int8", scope=f"moe{scope}")
        b.op("npu::npu_grouped_matmul", [act, w_down], (256, 7168), scope=f"moe{scope}")
    program = b.build()

    def op_time(variant):
        report = simulate(program, plan_program(program, profile, variant=variant), profile)
        ops = sum(k.duration_us for k in report.kernels if k.parent is None)
        fused = sum(k.duration_us for k in report.kernels if k.parent is None and (
            k.op_type == "npufuse::superkernel" or k.kernel_type in ("GroupedMatmul", "MoeGatingTopK", "DequantSwigluQuant")))
        return ops, fused

    return op_time(Variant.BASELINE), op_time("variant")


def superkernel_sample_rows() -> list[Row]:
    (base_ops, base_fused), (sk_ops, sk_fused) = superkernel_sample(A3)
    return [
        Row("SK sample op time 407.54 -> 384.66 us, gain (graph-autofusion)", 100 * (1 - 384.66 / 407.54),
            100 * (1 - sk_ops / base_ops), "%",
            lacks="per-op-type launch and barrier costs: in the sample MoeGatingTopK alone drops 11.4 -> 3.1 us in its "
                  "AIV SuperKernel while the MIX_AIC one grows 25 -> 28.7 us (AIC/AIV barriers); the model has one head "
                  "and one barrier cost for all"),
        Row("SK sample fused ops 218.8 us -> SuperKernels 190.9 us (graph-autofusion)", 190.88 / 218.76,
            sk_fused / base_fused, "x", lacks="per-op-type launch and barrier costs (see the row above)"),
    ]


# ------------------------------------------------------------------ DeepSeek-R1/V3 decode on A3


@dataclass(frozen=True)
class DeepSeekDecode:
    """One die's decode step of DeepSeek-R1/V3 (61 layers, 3 dense, MLA with 128 heads, 256 routed
    experts top-8 plus one shared, W8A8) with data-parallel attention and expert parallelism.

    ``tokens`` per die per step (batch x (1 + MTP drafts)), ``context`` the mean KV length,
    ``local_experts`` the routed experts per die, ``kv_bytes`` per cached token (576 in int8 C8, 1152 in
    bf16). ``superkernel``: the layer loop in one ``decode_layer`` scope; ``per_moe_scope``: one scope per
    MoE block (omni-infer's layout) instead; ``shared_stream``: the shared expert on a side stream.
    """

    tokens: int
    context: int
    batch: int
    local_experts: int = 2
    kv_bytes: int = 576
    mtp: bool = False
    superkernel: bool = False
    per_moe_scope: bool = False
    shared_stream: bool = False
    layers: int = 61
    dense_layers: int = 3

    def build(self):
        """The program and its cross-stream events."""
        b = ProgramBuilder()
        t, hidden = self.tokens, 7168
        weights = {
            "qa": b.input("w_qa", (hidden, 1536), "int8"), "qb": b.input("w_qb", (1536, 24576), "int8"),
            "kva": b.input("w_kva", (hidden, 576), "int8"), "uk": b.input("w_uk", (128, 128, 512)),
            "uv": b.input("w_uv", (128, 512, 128)), "o": b.input("w_o", (16384, hidden), "int8"),
            "gate": b.input("w_gate", (hidden, 256), "float32"), "sgu": b.input("w_sgu", (hidden, 4096), "int8"),
            "sd": b.input("w_sd", (2048, hidden), "int8"),
            "e1": b.input("w_e1", (self.local_experts, hidden, 4096), "int8"),
            "e2": b.input("w_e2", (self.local_experts, 2048, hidden), "int8"),
            "dgu": b.input("w_dgu", (hidden, 36864), "int8"), "dd": b.input("w_dd", (18432, hidden), "int8"),
            "lm": b.input("w_lm", (hidden, 129280)),
        }
        cache = b.input("kv_cache", (self.batch, self.context, self.kv_bytes), "int8")
        x = b.input("x", (t, hidden))
        syncs: list[Event] = []
        for layer in range(self.layers + (1 if self.mtp else 0)):
            scope = "decode_layer" if self.superkernel else None
            x = self._attention(b, weights, cache, x, scope)
            if layer < self.dense_layers:
                x = self._dense_ffn(b, weights, x, scope)
            else:
                x = self._moe(b, weights, x, layer, scope, syncs)
        for _ in range(2 if self.mtp else 1):
            b.op("aten::mm", [b.op("npu::npu_rms_norm", [x], (self.batch, hidden)), weights["lm"]], (self.batch, 129280))
        return b.build(), syncs

    def _attention(self, b, w, cache, x, scope):
        t, hidden = self.tokens, 7168
        h = b.op("npu::npu_rms_norm", [x], (t, hidden), scope=scope)
        hq = b.op("npu::npu_dynamic_quant", [h], (t, hidden), "int8", scope=scope)
        qa = b.op("npu::npu_quant_matmul", [hq, w["qa"]], (t, 1536), scope=scope)
        qa = b.op("npu::npu_rms_norm", [qa], (t, 1536), scope=scope)
        q = b.op("npu::npu_quant_matmul", [b.op("npu::npu_dynamic_quant", [qa], (t, 1536), "int8", scope=scope), w["qb"]],
                 (t, 24576), scope=scope)
        kv = b.op("npu::npu_rms_norm", [b.op("npu::npu_quant_matmul", [hq, w["kva"]], (t, 576), scope=scope)], (t, 576), scope=scope)
        rope = b.op("aten::mul", [q], (t, 128 * 64), scope=scope)
        b.op("aten::copy", [kv], (t, 576), "int8", scope=scope)  # KV cache update (ScatterNdUpdate in place)
        qn = b.op("aten::bmm", [q, w["uk"]], (128, t, 512), flops=2.0 * 128 * t * 128 * 512, scope=scope)
        attn = b.op("npu::npu_fused_infer_attention_score", [qn, rope, cache], (t, 128, 512), scope=scope,
                    flops=2.0 * t * 128 * self.context * (576 + 512))
        o = b.op("aten::bmm", [attn, w["uv"]], (128, t, 128), flops=2.0 * 128 * t * 512 * 128, scope=scope)
        o = b.op("npu::npu_quant_matmul", [b.op("npu::npu_dynamic_quant", [o], (t, 16384), "int8", scope=scope), w["o"]],
                 (t, hidden), scope=scope)
        return b.op("aten::add", [x, o], (t, hidden), scope=scope)

    def _dense_ffn(self, b, w, x, scope):
        t, hidden = self.tokens, 7168
        hq = b.op("npu::npu_dynamic_quant", [b.op("npu::npu_rms_norm", [x], (t, hidden), scope=scope)], (t, hidden), "int8", scope=scope)
        gu = b.op("npu::npu_quant_matmul", [hq, w["dgu"]], (t, 36864), scope=scope)
        act = b.op("npu::npu_dequant_swiglu_quant", [gu], (t, 18432), "int8", scope=scope)
        return b.op("aten::add", [x, b.op("npu::npu_quant_matmul", [act, w["dd"]], (t, hidden), scope=scope)], (t, hidden), scope=scope)

    def _moe(self, b, w, x, layer, scope, syncs):
        t, hidden, routed = self.tokens, 7168, self.tokens * 8
        scope = f"moe{layer}" if self.per_moe_scope else scope
        side = "22" if self.shared_stream else None
        h = b.op("npu::npu_rms_norm", [x], (t, hidden), scope=scope)
        logits = b.op("aten::mm", [h, w["gate"]], (t, 256), "float32", scope=scope)
        topk = b.op("npu::npu_moe_gating_top_k", [logits], (t, 8), "int32", scope=scope)
        hq = b.op("npu::npu_dynamic_quant", [h], (t, hidden), "int8", scope=scope)
        su = b.op("npu::npu_quant_matmul", [hq, w["sgu"]], (t, 4096), stream=side, scope=scope)
        sa = b.op("npu::npu_dequant_swiglu_quant", [su], (t, 2048), "int8", stream=side, scope=scope)
        sd = b.op("npu::npu_quant_matmul", [sa, w["sd"]], (t, hidden), stream=side, scope=scope)
        disp = b.op("npu::npu_moe_distribute_dispatch", [hq, topk], (routed, hidden), "int8", scope=scope)
        g1 = b.op("npu::npu_grouped_matmul", [disp, w["e1"]], (routed, 4096), scope=scope)
        a1 = b.op("npu::npu_dequant_swiglu_quant", [g1], (routed, 2048), "int8", scope=scope)
        g2 = b.op("npu::npu_grouped_matmul", [a1, w["e2"]], (routed, hidden), scope=scope)
        comb = b.op("npu::npu_moe_distribute_combine", [g2, topk], (t, hidden), scope=scope)
        out = b.op("aten::add", [comb, sd], (t, hidden))
        if side:
            names = {kernel.node: kernel.name for kernel in b.kernels}
            syncs += [Event(f"h{layer}", names[hq], names[su]), Event(f"s{layer}", names[sd], names[out])]
        return b.op("aten::add", [x, out], (t, hidden))

    def run(self, profile=A3, variant: str = "variant"):
        program, syncs = self.build()
        plan = plan_program(program, profile, variant=variant, syncs=syncs if variant != Variant.BASELINE else ())
        if (self.superkernel or self.per_moe_scope) and self.shared_stream and variant != Variant.BASELINE:
            plan = _dual_stream(plan, program)
        return program, simulate(program, plan, profile)


def _dual_stream(plan, program):
    """The plan as ``stream-fusion=1`` makes it: each SuperKernel runs its sub-kernels on one lane per
    stream, with Early-Start off."""
    from dataclasses import replace

    def lanes(segment):
        return tuple(program.kernel(name).stream for name in segment.kernels)

    tasks = tuple(task if task.segment is None else replace(task, segment=replace(
        task.segment, lanes=lanes(task.segment) if len(set(lanes(task.segment))) > 1 else (), early_start=False))
        for task in plan.tasks)
    return replace(plan, tasks=tasks)


def task_wait_per_layer(report, layers: int) -> float:
    """Profiles' "Task wait": idle time on the main stream between one task's end and the next's start."""
    rows = sorted((k for k in report.kernels if k.parent is None and k.stream == "default"), key=lambda k: k.start_us)
    idle = sum(max(0.0, later.start_us - earlier.end_us) for earlier, later in zip(rows, rows[1:]))
    return idle / layers


def deepseek_rows() -> list[Row]:
    rows = []
    # cann-recipes: 64 chips = 128 dies, global batch 6144 -> 48 per die, MTP1 (2 tokens per sequence per
    # step), 4K sequence, EP over 128 dies (2 routed experts each), C8 KV, SK + shared-expert stream.
    # TPOT 44.9 ms with 1.7 tokens per step accepted -> a step of 76.3 ms.
    recipe = DeepSeekDecode(tokens=96, context=4096, batch=48, mtp=True, superkernel=True, shared_stream=True)
    _, report = recipe.run()
    rows.append(Row("DeepSeek-R1 W8A8C8 decode step, 48/die, MTP1, SK (cann-recipes)", 44.9 * 1.7, report.time_us / 1000, "ms",
                    lacks="expert load imbalance and the MTP draft's sampling path"))
    # Omni-Infer + CANN on A3: 1D32 (64 dies), ~3168 concurrent -> ~50 per die, mean context ~4.1K
    # (3.5K in, 1.2K out), EP64 (4 routed experts per die), bf16 MLA cache (assumed), no MTP (assumed).
    omni = DeepSeekDecode(tokens=50, context=4100, batch=50, local_experts=4, kv_bytes=1152)
    _, before = omni.run(variant=Variant.BASELINE)
    rows.append(Row("DeepSeek-R1 decode TPOT, ~50/die, no SK (Omni-Infer A3 blog: 50 ms)", 50.0, before.time_us / 1000, "ms",
                    lacks="expert load imbalance across the 64 dies"))
    _, after = DeepSeekDecode(tokens=50, context=4100, batch=50, local_experts=4, kv_bytes=1152, superkernel=True).run()
    rows.append(Row("DeepSeek-R1 decode TPOT with SuperKernel (Omni-Infer A3 blog: 47 ms)", 47.0, after.time_us / 1000, "ms",
                    lacks="expert load imbalance across the 64 dies"))
    # Learning hub: DeepSeek-V3, batch 96, sequence 3K: ~18 us of task wait per layer, 1.1 ms over 61.
    hub = DeepSeekDecode(tokens=96, context=3072, batch=96)
    _, plain = hub.run(variant=Variant.BASELINE)
    rows.append(Row("DeepSeek-V3 task wait per layer, BS 96, 3K (learning hub: ~18 us)", 18.0,
                    task_wait_per_layer(plain, hub.layers), "us", lacks="the scheduler's queueing when tasks are short"))
    _, fused = DeepSeekDecode(tokens=96, context=3072, batch=96, superkernel=True).run()
    rows.append(Row("SuperKernel over DeepSeek layers, step gain (learning hub: 10-20%)", 10.0,
                    100 * (1 - fused.time_us / plain.time_us), "%", at_least=True,
                    lacks="per-op-type head and flush costs (one constant for every op here; the sample row shows some ops "
                          "lose far more than that in a SuperKernel)"))
    # omni-infer: SK per MoE block ~2 ms, MoE multi-stream (shared expert on a side stream) ~3 ms.
    _, omni_sk = DeepSeekDecode(tokens=50, context=4100, batch=50, local_experts=4, kv_bytes=1152, per_moe_scope=True).run()
    rows.append(Row("omni-infer: SuperKernel per MoE block saves ~2 ms (A3 decode)", 2.0, (before.time_us - omni_sk.time_us) / 1000, "ms",
                    lacks="the per-sub-kernel savings the vendor measured (its batch is not given)"))
    _, omni_ms = DeepSeekDecode(tokens=50, context=4100, batch=50, local_experts=4, kv_bytes=1152, shared_stream=True).run()
    rows.append(Row("omni-infer: MoE shared-expert stream saves ~3 ms (A3 decode)", 3.0, (before.time_us - omni_ms.time_us) / 1000, "ms",
                    lacks="omni's MLA side stream (kv_a_proj on stream '11'), not modeled here"))
    return rows


# ------------------------------------------------------------------ MC2 (DeepEP-Ascend low latency)


def mc2_rows() -> list[Row]:
    """DeepEP-Ascend low latency, A3, 128 tokens, hidden 7168, top-8, EP16: dispatch 139 us (int8),
    combine 135 us (bf16) (research hw §1.3)."""
    b = ProgramBuilder()
    x, topk = b.input("x", (128, 7168), "int8"), b.input("topk", (128, 8), "int32")
    disp = b.op("npu::npu_moe_distribute_dispatch", [x, topk], (128 * 8, 7168), "int8")
    comb = b.op("npu::npu_moe_distribute_combine", [b.input("y", (128 * 8, 7168)), topk], (128, 7168))
    program = b.build()
    report = simulate(program, plan_program(program, A3, variant=Variant.BASELINE), A3)
    times = {k.name: k.duration_us for k in report.kernels}
    names = {k.node: k.name for k in program.kernels}
    return [
        Row("MC2 dispatch, 128 tok, H 7168, top-8, EP16 (DeepEP-Ascend: 139 us)", 139.0, times[names[disp]], "us",
            lacks="per-rank token counts"),
        Row("MC2 combine, 128 tok, H 7168, top-8, EP16 (DeepEP-Ascend: 135 us)", 135.0, times[names[comb]], "us",
            lacks="per-rank token counts"),
    ]


def main() -> None:
    rows = [*seed_002_rows(), *seed_003_rows(), *superkernel_sample_rows(), *mc2_rows(), *deepseek_rows()]
    print(f"{'published result (source)':<66} {'published':>13} {'modeled':>13} verdict")
    for row in rows:
        print(row.line())
    print(f"\n{sum(row.within for row in rows)} of {len(rows)} rows within 30% (or meeting their bound)")
    print("\nforms of the same work seed 003 calls slower (no published number; modeled slow/fast ratio):")
    for name, ratio in seed_003_forms():
        print(f"  {name:<64} {ratio:>8.2f}x  {'slower, as published' if ratio > 1 else 'NOT slower'}")


if __name__ == "__main__":
    main()
