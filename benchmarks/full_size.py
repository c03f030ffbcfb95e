"""Whole models at their real size on a CI machine (issue 25): time and memory of timing-only checks.

    PYTHONPATH=. python benchmarks/full_size.py

Each measurement runs in its own Python process (its peak RSS is its own), building the model under
``init_empty_weights()`` from the bundled public configs (cases/full_size) and calling ``compare`` as a
test would. Printed side by side, with the modeled decode step of each bundled model:

1. DeepSeek-V3 (61 layers, MLA, 256 experts, one rank of EP 128, the cann-recipes decode layout) with
   ``numerics="sample"``: wall seconds and peak RSS of the check, and the layers computed bit for bit.
   Targets: <= 30 s wall, <= 4 GB peak RSS on 2 cores, >= 2 layers computed.
2. Peak RSS of a timing-only check (``numerics="none"``) of a 7B config (Llama-2-7B's public config on the
   dense builder) and of the 671B DeepSeek-V3: target within 10% of each other.
3. The 64-rank EP view (``ranks=64``, Zipf-skewed routing) of one DeepSeek-V3 MoE layer: target <= 10 s.

Wall-clock time is measured here only, never in the test suite; CPU seconds are printed beside it, since
a shared machine stretches the wall clock (check ``uptime``). The exit status is 1 when a target is missed.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "cases"))  # first: its full_size package, not this script of the same name

from timing import check  # noqa: E402

WALL_S, RSS_GB, SAMPLED_LAYERS, RSS_SPREAD, RANKS_S = 30.0, 4.0, 2, 0.10, 10.0
RANKS = 64

# HF meta-llama/Llama-2-7b-hf config.json: the 7B end of the memory comparison.
LLAMA_2_7B = {
    "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
}


def _case(name: str):
    """The bundled case or benchmark variant ``name``, with the compare keywords it is measured with."""
    from full_size import bundled
    from full_size.configs import Deployment

    if name == "deepseek-v3-sample":
        return bundled.DEEPSEEK_V3_CASE, {"numerics": "sample"}
    if name == "llama-2-7b":
        return bundled.FullSize("llama-2-7b", LLAMA_2_7B, Deployment(batch=48, context=4096, sk_options=""),
                                bundled.llama3.Llama3, bundled.gqa.decode_inputs), {"numerics": "none"}
    if name == "moe-layer-ranks":
        one = bundled.DEEPSEEK_V3_CASE.resized("deepseek-v3-moe-layer", num_hidden_layers=1, first_k_dense_replace=0)
        deployment = Deployment(batch=48, context=4096, ep=RANKS, shared_stream="22")
        return one.__class__(one.name, one.config, deployment, one.builder, one.inputs), {
            "numerics": "none", "ranks": RANKS, "routing": "zipf:1.2"}
    case = next(case for case in bundled.BUNDLED if case.name == name)
    return case, {"numerics": "none"}


def child(name: str) -> None:
    """Measure one check in this process and print its numbers as one JSON line."""
    from pytest_npufuse import compare

    case, keywords = _case(name)
    wall, cpu = time.perf_counter(), time.process_time()
    model, inputs = case.build()
    report = compare(model, *inputs, target="a3", **keywords)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({
        "name": name, "wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_us": report.variant.time_us, "layers": list(report.numerics.layers), "bit_exact": report.bit_exact,
        "kernels": len(report.variant.kernels), "summary": report.summary(),
        "ranks": report.ranks.describe() if report.ranks is not None else None,
    }))


def measure(name: str) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    sampled = measure("deepseek-v3-sample")
    small, large = measure("llama-2-7b"), measure("deepseek-v3")
    ranks = measure("moe-layer-ranks")
    steps = [large, measure("qwen3-235b-a22b"), measure("llama-3-70b")]
    print("modeled decode step of each bundled full-size model (timing only, one rank, a3):")
    for run in steps:
        print(f"  {run['name']:18s} {run['step_us'] / 1000:8.2f} ms  ({run['kernels']} kernels, check {run['wall']:.1f} s "
              f"wall / {run['cpu']:.1f} s cpu, peak RSS {run['rss_mb']:.0f} MB)")
    print(f"DeepSeek-V3 with numerics sampled: {sampled['summary']}")
    print(f"{RANKS}-rank view: {ranks['ranks']}")
    results = [
        check(sampled["wall"] <= WALL_S, f"full-size DeepSeek-V3 decode step, sampled numerics: {sampled['wall']:.1f} s "
              f"wall, {sampled['cpu']:.1f} s cpu (target <= {WALL_S:.0f} s, ratio {sampled['wall'] / WALL_S:.2f})"),
        check(sampled["rss_mb"] <= RSS_GB * 1024, f"its peak RSS {sampled['rss_mb'] / 1024:.2f} GB (target <= "
              f"{RSS_GB:.0f} GB, ratio {sampled['rss_mb'] / (RSS_GB * 1024):.2f})"),
        check(len(sampled["layers"]) >= SAMPLED_LAYERS and sampled["bit_exact"],
              f"layers computed bit for bit: {', '.join(sampled['layers'])} (target >= {SAMPLED_LAYERS})"),
        check(abs(large["rss_mb"] / small["rss_mb"] - 1) <= RSS_SPREAD,
              f"timing-only peak RSS, 671B DeepSeek-V3 {large['rss_mb']:.0f} MB vs 7B Llama-2 {small['rss_mb']:.0f} MB "
              f"(ratio {large['rss_mb'] / small['rss_mb']:.3f}, target within {RSS_SPREAD:.0%})"),
        check(ranks["wall"] <= RANKS_S, f"{RANKS}-rank EP view of one MoE layer: {ranks['wall']:.1f} s wall, "
              f"{ranks['cpu']:.1f} s cpu (target <= {RANKS_S:.0f} s, ratio {ranks['wall'] / RANKS_S:.2f})"),
    ]
    return 0 if all(results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sys.exit(main())
