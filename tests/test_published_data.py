"""The published-measurement dataset (benchmarks/data/published.toml) and the SKU facts (skus.toml) keep their
schema, their sources and their fixed train/validation split, so a cost model fitted on them can be trusted
to have been checked on rows it never saw (issue 21)."""

import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest
import tomllib

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"

KINDS = {"kernel", "layer", "step", "superkernel", "multistream", "collective", "host", "graph_mode"}
PAIR_KINDS = {"superkernel", "multistream", "graph_mode"}
VALUE_KINDS = {"kernel", "layer", "step", "collective"}
SKUS = {"910b1", "910b2", "910b3", "910b4", "910c", "910b"}
MODES = {"eager", "ge_graph", "aclgraph", "npugraph_ex", "inductor"}
METRICS = {"tpot", "step", "prefill", "kernel_sum", "task_wait", "fragment", "eager_call"}
REQUIRED = {"id", "kind", "split", "source", "where", "sku", "what", "unit"}
REQUIRED_BY_KIND = {
    "kernel": {"op", "inputs"},
    "layer": {"model", "metric"},
    "step": {"model", "metric", "mode"},
    "collective": {"op", "ranks"},
    "graph_mode": {"mode_before", "mode_after"},
    "superkernel": {"model"},
    "multistream": {"model"},
    "host": {"model"},
}
# Kept out of the dataset as an independent check (issues 21 and 40): matched against every string of a
# row. Issue 40 adds vllm-ascend's fine-grained TP guide and PRs #4517/#4526/#5951, the HunyuanVideo
# report (hunyuan), the npugraph_ex introduction blog post and the vLLM-Ascend multi-stream blog post.
RESERVED = re.compile(
    r"hunyuan|\bhy3\b|longcat|gemma|flaggems|torch-performance-test-data|vllm-ascend/pull/1353|#1353|0fc9b56d40"
    r"|fine[-_ ]?grained[-_ ]?tp|finegrained|pull/(4517|4526|5951)\b|#(4517|4526|5951)\b"
    r"|blogs?/\S*npugraph[-_]?ex|blogs?/\S*multi[-_]?stream",
    re.IGNORECASE,
)
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def load(name: str) -> dict:
    with open(DATA / name, "rb") as handle:
        return tomllib.load(handle)


@pytest.fixture(scope="module")
def published() -> dict:
    return load("published.toml")


@pytest.fixture(scope="module")
def rows(published) -> list[dict]:
    return published["row"]


def strings(value) -> list[str]:
    """Every string inside a row, however nested, for the reserved-source check."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def split_key(row: dict) -> str:
    return row.get("group", row["id"])


def rule_says_validation(key: str) -> bool:
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % 3 == 0


def test_at_least_one_hundred_rows_with_unique_ids(rows):
    ids = [row["id"] for row in rows]
    assert len(ids) >= 100
    assert not [i for i, n in Counter(ids).items() if n > 1], "duplicate ids"
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.-]*", i) for i in ids), "ids are lower-case slugs"


def test_every_row_has_the_keys_its_kind_needs(rows):
    for row in rows:
        assert row["kind"] in KINDS, row["id"]
        missing = (REQUIRED | REQUIRED_BY_KIND[row["kind"]]) - set(row)
        assert not missing, f"{row['id']}: missing {sorted(missing)}"
        assert row["unit"] in {"us", "ms"}, row["id"]
        assert row["sku"] in SKUS, row["id"]
        if row["sku"] == "910b":
            assert row.get("sku_note"), f"{row['id']}: an unnamed A2 bin needs sku_note"
        if "metric" in row:
            assert row["metric"] in METRICS, row["id"]
        for key in ("mode", "mode_before", "mode_after"):
            if key in row:
                assert row[key] in MODES, f"{row['id']}: {key}={row[key]}"


def test_values_and_pairs_are_positive_numbers(rows):
    for row in rows:
        has_value = "value" in row
        has_pair = "before" in row and "after" in row
        has_delta = "delta" in row
        if row["kind"] in VALUE_KINDS:
            assert has_value and not (has_pair or has_delta), row["id"]
        elif row["kind"] in PAIR_KINDS:
            assert (has_pair or has_delta) and not has_value, row["id"]
        else:
            assert has_value or has_pair or has_delta, row["id"]
        numbers = [row[k] for k in ("value", "before", "after", "delta") if k in row]
        assert all(isinstance(n, (int, float)) and n > 0 for n in numbers), row["id"]


def test_kernel_inputs_name_shape_and_dtype(rows):
    for row in (r for r in rows if r["kind"] == "kernel"):
        for tensor in row["inputs"]:
            assert set(tensor) == {"shape", "dtype"}, row["id"]
            assert all(isinstance(d, int) and d > 0 for d in tensor["shape"]), row["id"]


def test_every_row_cites_a_checkable_source(rows):
    for row in rows:
        source = row["source"]
        if "url" in source:
            assert source["url"].startswith("https://"), row["id"]
        else:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", source["repo"]), row["id"]
            assert HEX40.match(source["commit"]), f"{row['id']}: commit must be 40 hex digits"
        assert row["where"].strip(), row["id"]


def test_no_reserved_source_is_used(rows):
    for row in rows:
        hits = [s for s in strings(row) if RESERVED.search(s)]
        assert not hits, f"{row['id']} touches a reserved source: {hits}"


def test_split_follows_the_stated_rule(published, rows):
    fallback = set(published["split_fallback"])
    for row in rows:
        key = split_key(row)
        expected = "validation" if rule_says_validation(key) or key in fallback else "train"
        assert row["split"] == expected, f"{row['id']}: split {row['split']}, the rule says {expected}"
    for key in fallback:
        kind = {row["kind"] for row in rows if split_key(row) == key}
        assert len(kind) == 1, f"fallback key {key} names no single kind"
        assert not any(rule_says_validation(split_key(r)) for r in rows if r["kind"] in kind), \
            f"fallback {key} is only for a kind the rule left without validation rows"


def test_split_is_stratified_and_large_enough(rows):
    validation = [row for row in rows if row["split"] == "validation"]
    assert len(validation) >= 0.25 * len(rows)
    assert {row["kind"] for row in validation} == {row["kind"] for row in rows}
    for key in {split_key(row) for row in rows}:
        assert len({row["split"] for row in rows if split_key(row) == key}) == 1, key


def facts(table: dict):
    """(name, fact) for every fact of a SKU table, descending into nested tables such as [links.a3]."""
    for name, value in table.items():
        if isinstance(value, dict) and "value" not in value:
            yield from facts(value)
        else:
            yield name, value


def test_sku_facts_are_cited_or_marked_estimate():
    skus = load("skus.toml")
    for sku in ("910b1", "910b2", "910b3", "910b4", "910c"):
        table = skus[sku]
        assert {"aic", "aiv", "cube_mhz", "hbm_gib", "l2_mib"} <= set(table), sku
    for name, fact in facts(skus):
        assert isinstance(fact, dict) and "value" in fact, name
        if "estimate" in fact:
            assert fact["estimate"].strip(), name
        else:
            source = fact["source"]
            assert "url" in source or HEX40.match(source["commit"]), name
            assert fact["where"].strip(), name
        assert not [s for s in strings(fact) if RESERVED.search(s)], name


def test_sku_facts_agree_with_the_derived_peaks():
    """The Cube peak derived from cores x clock x 16^3 x 2 matches the cited bf16 figure where both exist."""
    skus = load("skus.toml")
    for sku in ("910b2", "910b3", "910b4", "910c"):
        table = skus[sku]
        derived = table["aic"]["value"] * table["cube_mhz"]["value"] * 1e6 * 16**3 * 2 / 1e12
        assert table["cube_bf16_tflops_derived"]["value"] == pytest.approx(derived, abs=0.05)
        if sku != "910c":  # msmodeling gives the A3 die the 1.8 GHz figure although its .ini says 1850 MHz
            assert table["cube_bf16_tflops"]["value"] == pytest.approx(derived, abs=0.1), sku


def test_a_row_builds_its_workload_from_its_own_fields(monkeypatch):
    """The calibration benchmark builds each row from the row (benchmarks/fidelity/); one kernel row and
    one collective row are cheap enough to check here (the benchmark itself is not a test)."""
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity.evaluate import evaluate
    from fidelity.rows import Profiles, load_rows, sku_target

    rows = {row.id: row for row in load_rows()}
    assert len(rows) >= 100
    profiles = Profiles()
    tiles = rows["catlass-mm-20aic-1024x576x6144-balanced"]
    assert sku_target(tiles) == "910b3"  # "20 AIC cores" in its sku_note
    outcome = evaluate(tiles, profiles)
    assert outcome.published == 48.6 and outcome.modeled > 0 and abs(outcome.error) < 1
    dispatch = evaluate(rows["deepep-ll-dispatch-a3-ep16"], profiles)
    assert dispatch.modeled > 0 and dispatch.gain is None


def test_a_fit_reuses_a_row_only_while_the_values_it_read_stay(monkeypatch):
    """The fit's memo (benchmarks/fidelity/trace.py) keys a row by the profile values its evaluation
    read: moving a constant the row never reads (an AI CPU rate, for a Cube kernel) reuses its outcome;
    moving one it reads (the Cube efficiency) simulates it again, to what a fresh evaluation gives."""
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity.evaluate import evaluate
    from fidelity.fit import Evaluator
    from fidelity.rows import Profiles, load_rows
    from pytest_npufuse.calibrate.fit import prior, tables

    row = next(row for row in load_rows() if row.id == "catlass-mm-20aic-1024x576x6144-balanced")
    evaluator = Evaluator([row])
    start = prior()
    (first,) = evaluator.outcomes(start, [row])
    (unread,) = evaluator.outcomes({**start, ("aicpu", "gflops_per_core"): 7.0}, [row])
    moved = {**start, ("efficiency", "cube_tile"): 0.9}  # below its shipped 1.0
    (read,) = evaluator.outcomes(moved, [row])
    assert unread is first
    assert read.modeled > first.modeled
    assert read.modeled == evaluate(row, Profiles(tables(moved))).modeled


def test_a_partial_refit_moves_only_the_named_estimates_from_their_shipped_values(monkeypatch):
    """``calibration.py --fit-only``: the constants one mechanism reads, re-fitted on training rows with every
    other constant as shipped (so a merged branch's fitted values are not refitted away); a name that is not
    a fitted estimate is refused with the list of those that are."""
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity.fit import Evaluator, fit_only, loss
    from fidelity.rows import load_rows

    rows = [row for row in load_rows() if row.id.startswith("deepep-ll-") and row.split == "train"]
    evaluator = Evaluator(rows)
    values = fit_only(rows, ["mc2.phase_us", "mc2.rank_us"], evaluator)
    assert set(values) == {("mc2", "phase_us"), ("mc2", "rank_us")}
    start = {("mc2", "phase_us"): 40.0, ("mc2", "rank_us"): 0.0}
    assert loss(evaluator.outcomes(values, rows)) < loss(evaluator.outcomes(start, rows))
    with pytest.raises(SystemExit, match="mc2.phase_us"):
        fit_only(rows, ["mc2.phase"], evaluator)


def test_a_row_that_says_how_its_graph_was_compiled_says_where_that_is_stated(rows):
    for row in rows:
        if "shapes" in row:
            assert row["shapes"] == "dynamic" and row["mode"] == "ge_graph", row["id"]
            assert row["shapes_source"].strip(), row["id"]


def test_a_row_that_says_how_its_step_ran_says_where_that_is_stated(rows):
    stated = [row for row in rows if "mode_source" in row]
    assert stated, "the Qwen3-8B prefill rows state that cann-recipes-infer's executor prefills eager"
    for row in stated:
        assert row["mode_source"].strip() and row["metric"] == "prefill", row["id"]


def test_a_row_that_names_vllm_s_graph_mode_says_where_that_is_stated(rows):
    stated = [row for row in rows if "cudagraph_mode" in row]
    assert stated, "the Kimi-K2-Thinking served rows name vLLM's cudagraph mode"
    for row in stated:
        assert row["cudagraph_mode"] in ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"), row["id"]
        assert row["framework"].startswith("vllm"), row["id"]
        assert row["cudagraph_source"].strip(), row["id"]


def test_leave_one_source_out_predicts_each_row_by_a_fit_that_saw_no_row_of_its_source(monkeypatch):
    """``calibration.py --loso``: one fit per source document (a web page, a repository file, a commit);
    every row of that source is predicted by the fit on the others, and nothing else is."""
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity import fit as fitting
    from fidelity.rows import load_rows

    rows = load_rows()
    fitted_on: list[frozenset[str]] = []

    def fake_fit(training, evaluator):
        fitted_on.append(frozenset(fitting.source_of(row) for row in training))
        return {}

    class Outcomes:
        def outcomes(self, values, held):
            return [type("Outcome", (), {"row": row})() for row in held]

    monkeypatch.setattr(fitting, "fit", fake_fit)
    predicted = fitting.leave_one_source_out(rows, Outcomes())
    sources = {fitting.source_of(row) for row in rows}
    assert len(fitted_on) == len(sources) > 20
    assert all(len(seen) == len(sources) - 1 for seen in fitted_on)
    assert [outcome.row.id for outcome in predicted] == [row.id for row in rows]
    catlass = [row for row in rows if fitting.source_of(row).startswith("hicann/catlass:examples/52_")]
    assert len(catlass) > 1  # one document's rows are held out together


def test_the_coverage_table_counts_every_row_on_every_axis(monkeypatch):
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity.coverage import AXES, coverage_lines
    from fidelity.rows import load_rows

    rows = load_rows()
    lines = coverage_lines(rows)
    blocks = "\n".join(lines).split("by ")[1:]
    assert len(blocks) == len(AXES)
    for block in blocks:
        counts = [int(re.search(r"(\d+) rows", line).group(1)) for line in block.splitlines()[1:]]
        assert sum(counts) == len(rows)


@pytest.mark.parametrize("source", [
    "https://github.com/vllm-project/vllm-ascend/pull/4517", "vllm-ascend PR #5951",
    "docs/source/user_guide/feature_guide/Fine_grained_TP.md", "cann-recipes-infer HunyuanVideo report",
    "blogs/inference/npugraph_ex_intro.md", "https://example.org/blog/vllm-ascend-multi-stream",
])
def test_the_reserved_pattern_catches_issue_40s_sources(source):
    assert RESERVED.search(source)


def test_an_eager_loop_row_is_priced_per_call_by_the_host_or_by_its_kernel(monkeypatch):
    """Eager-loop rows (``metric = "eager_call"``, benchmarks/fidelity/eager.py): a small fused attention
    called in a loop costs the host's eager path per call whatever its key length, while a long one costs
    its kernel, whose work grows with the square of the sequence."""
    monkeypatch.syspath_prepend(str(DATA.parent))
    from fidelity.evaluate import evaluate
    from fidelity.rows import Profiles, load_rows

    rows = {row.id: row for row in load_rows()}
    profiles = Profiles()
    short, longer = (evaluate(rows[f"ptoisa-fia-910b2-sq128-sk{keys}-eager"], profiles).modeled for keys in (1024, 8192))
    assert short > 0 and longer / short < 1.05
    s32k, s64k = (evaluate(rows[f"tilelang-fa-bench-a3-npu-fusion-attention-s{s}"], profiles).modeled for s in ("32k", "64k"))
    assert 3.5 < s64k / s32k < 4.5 and s32k > 100 * short
