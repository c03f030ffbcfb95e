"""The served-run model of the calibration benchmark (benchmarks/fidelity/serving.py): a serving
benchmark's mean TPOT follows from its arrivals, the scheduler's cap and the model's own step times
(issue 21), not from a batch size written into the row."""

import math
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def serving(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from fidelity import serving

    return serving


def flat(ms):
    return lambda batch: ms


def test_one_request_at_a_time_decodes_at_the_one_sequence_step(serving):
    """Requests spaced further apart than they live never meet: TPOT is the step, TTFT the prefill."""
    run = serving.Serving(prompts=3, rate=0.01, max_seqs=12, output_len=101)
    served = serving.serve(run, lambda batch: 10.0 * batch, prefill_ms=50.0)
    assert served.tpot_ms == pytest.approx(10.0)
    assert served.ttft_ms == pytest.approx(50.0)
    assert served.mean_batch == pytest.approx(1.0)


def test_concurrency_follows_littles_law(serving):
    """In steady state the requests in flight are the arrival rate times a request's life (TTFT plus its
    decode steps): 2 requests/s living 1 s each keep about 2 in flight."""
    run = serving.Serving(prompts=400, rate=2.0, max_seqs=64, output_len=101)
    served = serving.serve(run, flat(10.0), prefill_ms=0.0)
    life_s = (served.ttft_ms + (run.output_len - 1) * served.tpot_ms) / 1000
    assert served.mean_batch == pytest.approx(run.rate * life_s, rel=0.05)


def test_prefills_admitted_meanwhile_stretch_the_running_requests_tpot(serving):
    """A burst prefills every waiting request before the next decode step (the scheduler serves prefills
    first): the first request's decode waits for the others' prefills, so the mean TPOT grows with the
    prefill time; with no prefill cost it is the step itself."""
    run = serving.Serving(prompts=32, rate=math.inf, max_seqs=math.inf, output_len=1024)
    free = serving.serve(run, flat(70.0), prefill_ms=0.0)
    paid = serving.serve(run, flat(70.0), prefill_ms=900.0)
    assert free.tpot_ms == pytest.approx(70.0)
    assert paid.tpot_ms == pytest.approx(70.0 + 900.0 * 15.5 / 1023)
    assert paid.ttft_ms == pytest.approx(900.0 * 16.5)


def test_the_scheduler_cap_bounds_the_batch(serving):
    run = serving.Serving(prompts=20, rate=math.inf, max_seqs=4, output_len=50)
    served = serving.serve(run, lambda batch: 5.0 + batch, prefill_ms=1.0)
    assert served.mean_batch <= 4
    assert served.tpot_ms > 5.0 + 3


def test_a_row_s_serving_table_is_split_over_its_data_parallel_engines(serving):
    row = {"serving": {"prompts": 1024, "request_rate": "inf", "output_len": 1024}}
    assert serving.serving_of(row, 32) == serving.Serving(32, math.inf, math.inf, 1024)
    rated = serving.serving_of({"serving": {"prompts": 10, "request_rate": 1.0, "max_num_seqs": 12, "output_len": 512}}, 1)
    assert rated.arrivals_ms()[:3] == [0.0, 1000.0, 2000.0] and rated.max_seqs == 12
    assert serving.serving_of({}, 1) is None


def test_decode_steps_between_the_modeled_ends_lie_on_their_line(serving):
    steps = serving.linear_steps(27.0, 33.0, 10)
    assert steps(1) == 27.0 and steps(10) == pytest.approx(33.0) and steps(4) == pytest.approx(29.0)


def test_vllm_ascend_captures_decode_graphs_up_to_max_num_seqs_without_doubling(serving):
    assert serving.vllm_capture_sizes(12, 1, 8192) == (1, 2, 4, 8)
    assert serving.vllm_capture_sizes(64, 1, 8192) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert serving.vllm_capture_sizes(12, 2, 8192) == (1, 2, 4, 8, 16, 24)
    assert serving.vllm_capture_sizes(1024, 1, 8192)[-1] == 512
    assert serving.vllm_capture_sizes(12, 1, 6) == (1, 2, 4, 6)


def test_a_decode_batch_replays_the_smallest_graph_that_holds_it_and_runs_eager_above_them_all(serving):
    step = serving.graph_or_eager_steps((1, 2, 4, 8), graph=lambda batch: 20.0 + batch, eager=lambda batch: 100.0 + batch)
    assert [step(batch) for batch in (1, 3, 8, 9, 12)] == [21.0, 24.0, 28.0, 109.0, 112.0]


def test_vllm_s_full_decode_graphs_have_their_attention_rebound_and_no_other_mode_does(serving):
    """In vLLM's FULL modes (FULL_AND_PIECEWISE, vLLM-Ascend's default, among them) a decode graph captures
    the attention, whose per-sequence KV lengths the host rebinds after each replay; eager and piecewise
    runs call the attention afresh every step, and a row that does not say gets nothing rebound."""
    for mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        assert serving.rebound_ops(mode) == {serving.ATTENTION_OP}
    for mode in ("NONE", "PIECEWISE", None):
        assert serving.rebound_ops(mode) == frozenset()
