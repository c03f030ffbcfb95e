"""The host items of docs/feature-docs.md#host-scheduling on captured decode steps (benchmarks/fidelity/host_rows.py):
GE's tiling cache per op node, its cut and gain on a float16 and a W8A8 LLaMA-shaped step, and the pangu-38B-like
stand-in built from public configs (docs/sources.md#w8a8-llama). Small widths: what the cache does depends on the
ops and which of their shapes follow the KV length, not on the widths; the full sizes are
``PYTHONPATH=. python benchmarks/host_sweep.py`` (docs/fidelity.md#tiling-cache-sweep)."""

from collections import Counter
from pathlib import Path

import pytest

from pytest_npufuse.target.profile import load_profile

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
A2 = load_profile("910b2")


@pytest.fixture(scope="module")
def host_rows():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        from fidelity import host_rows

        yield host_rows


def small(host_rows, layers=2, quant=False):
    return host_rows.HostModel(f"small {layers} {quant}", 256, layers, 4, 512, 1000, "test", quant=quant)


@pytest.fixture(scope="module")
def rows(host_rows):
    return {quant: host_rows.sweep_row(small(host_rows, quant=quant), A2) for quant in (False, True)}


def test_capture_marks_the_kernels_whose_shapes_follow_the_kv_length(host_rows):
    program = small(host_rows, quant=True).program()
    kinds = Counter((k.info.kernel_type, k.symbolic_sizes) for k in program.kernels if not k.info.ge_shape)
    assert kinds[("BatchMatMulV3", True)] == 4 and kinds[("SoftmaxV2", True)] == 2  # the attention over the cache
    assert kinds[("ConcatD", True)] >= 4  # the new key and value appended to the cache
    assert kinds[("QuantBatchMatmulV3", False)] == 10 and kinds[("AscendQuantV2", False)] == 8  # the W8A8 linears
    assert not any(symbolic for (kind, symbolic) in kinds if kind in ("QuantBatchMatmulV3", "MatMulV2", "Swish"))


def test_a_decode_step_tiles_at_most_half_as_long_with_the_cache_and_stays_host_bound(rows):
    """The article: Tiling cut by more than half on LLaMA-2 and pangu, the step still host-bound."""
    for row in rows.values():
        assert row.cut_pct > 50 and row.gain_pct > 0 and row.bound == "host"


def test_the_gain_of_the_cache_follows_the_share_of_host_time_spent_tiling(rows):
    """The article's reason for the quantised pangu-38B's larger gain: Tiling is a large share of its host time.
    The W8A8 layer adds four activation quantisations (simple tilings) in front of its five linears but merges
    Q, K and V into one projection (two complex tilings fewer), so at the catalogue's per-class Tiling costs it spends a
    smaller share tiling than the float16 layer, and gains less (docs/fidelity.md#tiling-cache-sweep)."""
    plain, quant = rows[False], rows[True]
    assert quant.kernels > plain.kernels
    assert (quant.share_pct > plain.share_pct) == (quant.gain_pct > plain.gain_pct)
    assert quant.share_pct < plain.share_pct


def test_the_pangu_38b_like_stand_in_is_a_w8a8_decoder_of_about_36b_parameters(host_rows):
    stand_in = next(model for model in host_rows.SIZES if model.name.startswith("pangu-38B"))
    assert stand_in.quant and stand_in.kv_heads == 8 and stand_in.bias and stand_in.vocab == 153376
    assert 34e9 < stand_in.parameters < 38e9
    llama7b = next(model for model in host_rows.SIZES if model.name == "LLaMA-2 7B")
    assert 6.5e9 < llama7b.parameters < 7e9  # the parameter count follows the public configs


def test_a_decode_step_with_a_symbolic_batch_reaches_the_articles_650_size_ops_at_llama_2_7b_depth(host_rows):
    """The article's LLaMA-2 computes 650+ Pack/Gather/Concat ops on the host. At batch 1 only the KV length is
    symbolic and LLaMA-2 7B's 32 layers give 354; compiled with dynamic=True at batch 4 (Ascend/torchair's
    LLaMA-2 examples), the batch is symbolic in every view and the step passes 650."""
    def count(batch):
        model = host_rows.HostModel("small", 256, 32, 4, 512, 1000, "test")
        return sum(host_rows.size_ops(model, batch).values())

    assert count(1) == 354
    assert count(4) >= 650
