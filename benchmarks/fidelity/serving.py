"""Served runs: a serving benchmark's mean TPOT from the model's own decode and prefill step times.

A serving benchmark (vLLM's ``bench serve`` / ``benchmark_serving.py``) sends ``prompts`` requests at
``request_rate`` per second (``inf``: all at once) to an engine that batches them continuously: a
request waits until it is admitted (at most ``max_num_seqs`` run at once), is prefilled, then decodes one
token per decode step of every running request together. A prefill runs between decode steps (vLLM's
scheduler serves waiting prefills first), so each decode step a request sees is stretched by the prefills
admitted meanwhile. Its TPOT is ``(finish - first token) / (output_len - 1)``, averaged over requests, as
the benchmark reports it.

How many requests run together is not a number of the run: it follows from the arrivals and from how
long each request lives (Little's law: in flight = rate x (TTFT + output_len x TPOT)), and the step time
depends on it. :func:`serve` resolves that fixed point by playing the schedule through, step by step:
deterministic arithmetic, no sampling (arrivals are evenly spaced at the stated rate).

In a captured-graph mode a decode step replays the graph captured for the smallest capture size that
holds its batch (the batch padded to it); a batch above the largest capture size runs eager
(:func:`vllm_capture_sizes`, :func:`graph_or_eager_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class Serving:
    """What a served run states, per engine: ``prompts`` requests arriving ``rate`` per second (``math.inf``
    for all at once), at most ``max_seqs`` running together, ``output_len`` tokens each, at most
    ``max_batched_tokens`` in one step (None where the run does not state it)."""

    prompts: int
    rate: float
    max_seqs: float
    output_len: int
    max_batched_tokens: int | None = None

    def arrivals_ms(self) -> list[float]:
        """Arrival times in ms, evenly spaced at the rate."""
        return [0.0 if math.isinf(self.rate) else 1000.0 * k / self.rate for k in range(self.prompts)]


@dataclass(frozen=True)
class Served:
    """The run's means as the benchmark reports them, and the concurrency it reached (a decode step's
    batch, averaged over decode steps)."""

    ttft_ms: float
    tpot_ms: float
    mean_batch: float


def serving_of(row_fields: Mapping, engines: int) -> Serving | None:
    """The row's ``serving`` table split over ``engines`` data-parallel engines (requests spread evenly),
    or None for a row that is not a served run."""
    table = row_fields.get("serving")
    if not table:
        return None
    rate = table.get("request_rate", "inf")
    rate = math.inf if rate == "inf" else float(rate) / engines
    return Serving(
        prompts=max(1, round(table["prompts"] / engines)),
        rate=rate,
        max_seqs=table.get("max_num_seqs", math.inf),
        output_len=table["output_len"],
        max_batched_tokens=table.get("max_num_batched_tokens"),
    )


def serve(serving: Serving, decode_ms: Callable[[int], float], prefill_ms: float) -> Served:
    """Play the schedule through: admit an arrived request when fewer than ``max_seqs`` run and prefill it
    (``prefill_ms``, its first token at the end), else run one decode step of all running requests
    (``decode_ms(batch)``), else wait for the next arrival."""
    waiting = serving.arrivals_ms()
    running: dict[int, list[float]] = {}  # request -> [tokens left, first token time]
    ttfts, tpots, batches = [], [], []
    clock = 0.0
    next_request = 0
    while next_request < len(waiting) or running:
        if next_request < len(waiting) and waiting[next_request] <= clock and len(running) < serving.max_seqs:
            clock += prefill_ms
            ttfts.append(clock - waiting[next_request])
            running[next_request] = [serving.output_len - 1, clock]
            next_request += 1
        elif running:
            batches.append(len(running))
            clock += decode_ms(len(running))
            for request in list(running):
                state = running[request]
                state[0] -= 1
                if state[0] <= 0:
                    tpots.append((clock - state[1]) / max(1, serving.output_len - 1))
                    del running[request]
        else:
            clock = waiting[next_request]
    return Served(sum(ttfts) / len(ttfts), sum(tpots) / len(tpots), sum(batches) / max(1, len(batches)))


def vllm_capture_sizes(max_num_seqs: int, decode_query_len: int = 1, max_num_batched_tokens: int | None = None) -> tuple[int, ...]:
    """The decode batch sizes vLLM captures a graph for by default on vLLM-Ascend: 1, 2, 4, then every
    multiple of 8 below 256 and of 16 from 256, up to a ceiling of ``max_num_seqs x decode_query_len``
    capped at 512 (vLLM-Ascend's ``_get_default_max_cudagraph_capture_size``, which drops upstream vLLM's
    doubling) and at ``max_num_batched_tokens`` (vLLM's ``VllmConfig._set_cudagraph_sizes``, which then
    truncates the ceiling to the largest size in the list). With ``max_num_seqs`` 12 that is 1, 2, 4, 8:
    a decode step of 9 to 12 sequences has no graph and runs eager."""
    ceiling = min(max_num_seqs * decode_query_len, 512)
    if max_num_batched_tokens is not None:
        ceiling = min(ceiling, max_num_batched_tokens)
    sizes = [size for size in (1, 2, 4) if size <= ceiling]
    sizes += list(range(8, min(ceiling + 1, 256), 8)) + list(range(256, ceiling + 1, 16))
    if max_num_batched_tokens is not None and max_num_batched_tokens <= ceiling:
        sizes.append(max_num_batched_tokens)
    return tuple(sorted(set(sizes)))


# The attention op of the modeled decoders (benchmarks/fidelity/models.py); vLLM-Ascend's MLA and GQA
# backends call npu_fused_infer_attention_score(_v2) in decode, priced as this op.
ATTENTION_OP = "npu::npu_fused_infer_attention_score"
# vLLM's cudagraph modes whose uniform decode batches replay a FULL graph (attention captured inside).
FULL_DECODE_MODES = frozenset({"FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})


def rebound_ops(cudagraph_mode: str | None) -> frozenset[str]:
    """The op types whose captured tasks vLLM-Ascend rebinds on the host after each replay of a decode
    graph in ``cudagraph_mode`` (vLLM's ``compilation_config.cudagraph_mode``; None: not stated). In the
    FULL modes the attention runs inside the graph with its per-sequence KV lengths frozen at capture, so
    after every replay the model runner's ``update_full_graph_params`` calls each layer's attention again
    between ``graph_task_update_begin``/``_end`` and records the event the captured task waits on
    (vllm-project/vllm-ascend vllm_ascend/worker/model_runner_v1.py ``_model_forward`` and
    vllm_ascend/attention/mla_v1.py ``update_graph_params`` @182b75ea). PIECEWISE runs attention outside
    its pieces instead, which nothing here models; no other mode rebinds."""
    return frozenset({ATTENTION_OP}) if cudagraph_mode in FULL_DECODE_MODES else frozenset()


def graph_or_eager_steps(
    sizes: tuple[int, ...], graph: Callable[[int], float], eager: Callable[[int], float]
) -> Callable[[int], float]:
    """A decode step at any batch: the captured graph of the smallest size that holds the batch (padded
    up to it), or the eager step when the batch is larger than every captured size."""
    def step(batch: int) -> float:
        padded = next((size for size in sizes if size >= batch), None)
        return graph(padded) if padded is not None else eager(batch)

    return step


def linear_steps(one: float, full: float, batch: int) -> Callable[[int], float]:
    """A decode step's time at any batch from the modeled steps at one sequence and at ``batch``: weight
    streaming is paid once per step and the per-sequence work (KV reads, activations) grows with the
    batch, so a straight line between the two is what the model's own steps imply in between."""
    if batch <= 1:
        return lambda _: full
    slope = (full - one) / (batch - 1)
    return lambda running: one + slope * (running - 1)
