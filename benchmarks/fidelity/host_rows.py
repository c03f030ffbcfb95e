"""The host rows of docs/feature-docs.md#host-scheduling: captured LLaMA-shaped decode steps under GE host scheduling.

The small-shape row compares the step with GE's small-shape ops launched on the device (before) and
computed on the host (after). The size sweep runs the article's tiling-cache claims (Tiling cut by half or
more on pangu and LLaMA-2, "模型参数量越大，优化效果越显著", the quantised pangu-38B gaining most because
Tiling is a large share of its host time) over the article's models and sizes, each from a public config
(docs/fidelity.md#the-tiling-cache-by-model-size says what the sweep shows and why).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pytest_npufuse.plan.tasks import Variant
from pytest_npufuse.simulate.host import HostConfig
from pytest_npufuse.simulate.timeline import RunReport, simulate
from pytest_npufuse.target.profile import HardwareProfile

from .llama import captured_llama
from .models import plan_of
from .rows import Profiles, Row


@dataclass(frozen=True)
class HostModel:
    """A LLaMA-shaped decoder (benchmarks/fidelity/llama.py) and where its dimensions come from."""

    name: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    config: str
    kv_heads: int | None = None
    bias: bool = False
    quant: bool = False

    def program(self, batch: int = 1):
        """Its decode step, captured with the KV length symbolic (and the batch, above 1)."""
        return captured_llama(self.hidden, self.layers, self.heads, self.ffn, self.vocab, kv_heads=self.kv_heads,
                              bias=self.bias, quant=self.quant, batch=batch)

    @property
    def parameters(self) -> int:
        """Weights of the decoder: embedding and head, and per layer the attention and SwiGLU projections."""
        dim = self.hidden // self.heads
        kv = (self.kv_heads or self.heads) * dim
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + (self.hidden + 2 * kv) * self.bias
        return 2 * self.vocab * self.hidden + self.layers * (attention + 3 * self.hidden * self.ffn)


_LLAMA2 = "meta-llama/Llama-2-{}-hf config.json (Hugging Face)"
_PANGU = "openPangu-Embedded-7B configuration_openpangu_dense.py (vocab 153376, GQA 32/8, bias=True)"
_W8A8 = "; W8A8 as Ascend/torchair npu_tuned_model/llm/llama/quantization quantises LLaMA-2 7B"

SIZES = (
    HostModel("LLaMA-2 7B", 4096, 32, 32, 11008, 32000, _LLAMA2.format("7b")),
    HostModel("LLaMA-2 7B W8A8", 4096, 32, 32, 11008, 32000, _LLAMA2.format("7b") + _W8A8, quant=True),
    HostModel("LLaMA-2 13B", 5120, 40, 40, 13824, 32000, _LLAMA2.format("13b")),
    HostModel("openPangu-Embedded-7B", 4096, 34, 32, 12800, 153376, _PANGU, kv_heads=8, bias=True),
    HostModel("LLaMA-2 70B", 8192, 80, 64, 28672, 32000, _LLAMA2.format("70b"), kv_heads=8),
    # pangu-38B's config is not public: openPangu's dense layer (GQA, QKV bias, its vocabulary) at the depth
    # and width of LLaMA-2's 34B (the LLaMA-2 paper's table 1; its public config is CodeLlama-34B's), W8A8.
    HostModel("pangu-38B-like W8A8 stand-in", 8192, 48, 64, 22016, 153376,
              "codellama/CodeLlama-34b-hf config.json dims; " + _PANGU + _W8A8, kv_heads=8, bias=True, quant=True),
)


def _run(model: HostModel, profile: HardwareProfile, **host) -> RunReport:
    """The captured decode step of ``model`` under GE host scheduling, one host thread."""
    program = model.program()
    plan = plan_of(("captured llama", model), program, profile, variant=Variant.BASELINE)
    return simulate(program, plan, profile, dynamic=True, host=HostConfig(**{"threads": 1, **host}))


def host_pair(row: Row, profiles: Profiles) -> tuple[float, float]:
    """End-to-end step time with the small-shape ops launched on the device (before) and computed on the
    host (after), one host thread, warm tiling cache."""
    dims = tuple(row.model[key] for key in ("hidden", "layers", "heads", "ffn", "vocab"))
    model = HostModel(row.model["name"], *dims, row.get("config_source", ""))
    profile = profiles.for_row(row)
    return _run(model, profile, small_shape_on_host=False).time_us, _run(model, profile).time_us


def tiling_us(report: RunReport) -> float:
    """Host time spent in Tiling, cached or not."""
    return sum(s.end_us - s.start_us for s in report.host if s.name in ("Tiling", "TilingCacheHit"))


def host_busy_us(report: RunReport) -> float:
    """Host time spent in any host kernel."""
    return sum(s.end_us - s.start_us for s in report.host)


@dataclass(frozen=True)
class SweepRow:
    """One model of the sweep. ``cut_pct``: Tiling time a decode step saves with the cache (the step after
    one with a KV cache one token shorter); ``share_pct``: Tiling's share of the host's time without it;
    ``gain_pct``: the step's end-to-end gain of the cache; ``bound``: what bounds the cached step."""

    model: HostModel
    kernels: int
    size_ops: int
    cut_pct: float
    share_pct: float
    gain_pct: float
    bound: str


def sweep_row(model: HostModel, profile: HardwareProfile) -> SweepRow:
    """The tiling cache on ``model``'s decode step: uncached, and cached on a step with new KV sizes."""
    program = model.program()
    uncached = _run(model, profile, tiling_cache=False)
    cached = _run(model, profile, new_sizes=True)
    return SweepRow(
        model, sum(not k.info.ge_shape for k in program.kernels), sum(k.info.ge_shape for k in program.kernels),
        100 * (1 - tiling_us(cached) / tiling_us(uncached)), 100 * tiling_us(uncached) / host_busy_us(uncached),
        100 * (uncached.time_us / cached.time_us - 1), cached.bound,
    )


def size_sweep(profile: HardwareProfile, models: tuple[HostModel, ...] = SIZES) -> list[SweepRow]:
    """:func:`sweep_row` of every model of the sweep."""
    return [sweep_row(model, profile) for model in models]


def size_ops(model: HostModel, batch: int = 1) -> Counter[str]:
    """GE's size ops in ``model``'s captured decode step, by kind (``ge::shape``, ``ge::gather``, ``ge::pack``,
    ``ge::size_arith``): the small-shape ops GE computes on the host. With the KV length the only symbolic
    size (batch 1) few of a layer's ops are given one; a symbolic batch puts one in every view of the layer."""
    return Counter(kernel.op_type for kernel in model.program(batch).kernels if kernel.info.ge_shape)
