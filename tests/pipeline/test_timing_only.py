"""Timing-only models (weights on the meta device): the same modeled report as with weights, numerics
not computed or computed on a sample of layers, and clear errors where a model needs values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pytest_npufuse import advise, compare, init_empty_weights
from pytest_npufuse.errors import ArgumentError, CaptureError, DeviceMemoryError
from pytest_npufuse.execute.sample import compute_sample, sampled_layers
from pytest_npufuse.execute import sample
from pytest_npufuse.execute.seeded import seeded_like, seeded_rows
from pytest_npufuse.frontend.repeat import layer_container
from pytest_npufuse.numerics import exact
from pytest_npufuse.pipeline import chain
from pytest_npufuse.vocabulary import NumericsStatus

sys.path.insert(0, str(Path(__file__).parents[2] / "cases"))
from decoder_layers import Decoder, decode_inputs  # noqa: E402


class _Layer(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, width) / 4)
        self.v = torch.nn.Parameter(torch.randn(width, 16) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(x @ self.w) @ self.v


class _Stack(torch.nn.Module):
    """Two wide layers, then a run of narrow ones: DeepSeek-V3's dense-then-MoE shape, in small."""

    def __init__(self, wide: int = 2, narrow: int = 6) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer(64) for _ in range(wide)] + [_Layer(32) for _ in range(narrow)])
        self.norm = torch.nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x * self.norm


def _empty(build):
    with init_empty_weights():
        return build()


def test_init_empty_weights_allocates_nothing():
    model = _empty(lambda: _Stack())
    assert all(p.is_meta for p in model.parameters())
    assert torch.empty(3).device.type == "cpu"  # the block is closed again


def test_a_meta_model_gets_the_report_of_the_model_with_weights():
    torch.manual_seed(0)
    x = torch.randn(4, 16)
    real = compare(_Stack(), x)
    empty = compare(_empty(_Stack), x)
    assert real.numerics.status is NumericsStatus.COMPUTED
    assert empty.numerics.status is NumericsStatus.NOT_COMPUTED
    assert (empty.baseline.time_us, empty.variant.time_us) == (real.baseline.time_us, real.variant.time_us)
    assert [k.name for k in empty.variant.kernels] == [k.name for k in real.variant.kernels]
    assert "numerics not computed (timing only)" in empty.summary()
    assert empty.kernels_executed == 0


def test_meta_inputs_and_multistream_layers_are_priced_in_full():
    model, inputs = Decoder(layers=6, shared_stream="shared"), decode_inputs()
    real = compare(model, *inputs)
    empty = compare(_empty(lambda: Decoder(layers=6, shared_stream="shared")), *[x.to("meta") for x in inputs])
    assert empty.variant.time_us == real.variant.time_us
    assert empty.streams == real.streams and empty.races == real.races
    assert any(line.startswith("routing: uniform") for line in empty.numerics.stand_ins)


def test_sampled_numerics_compute_the_first_last_and_one_layer_per_kind():
    model = _empty(lambda: _Stack(wide=2, narrow=6))
    stack = layer_container(model)
    assert sampled_layers(stack) == (0, 7)  # layer 0 is wide, layer 7 narrow: both kinds covered
    report = compare(model, torch.randn(4, 16), numerics="sample")
    assert report.numerics.status is NumericsStatus.SAMPLED
    assert report.numerics.layers == ("layers.0", "layers.7") and report.numerics.weights == "seeded"
    assert report.outputs == ("output[0]",) and report.captures == 2  # the model with layers 0 and 7 only
    assert report.bit_exact and report.kernels_executed > 0
    assert all(p.is_meta for p in model.parameters())  # the seeded weights were never put in the model
    assert len(model.layers) == 8


def test_a_kind_between_first_and_last_is_sampled_too():
    model = _empty(lambda: _Stack(wide=0, narrow=6))
    model.layers.insert(3, _Layer(64))
    assert sampled_layers(layer_container(model)) == (0, 3, 6)


def test_the_sample_runs_beside_the_capture_with_a_short_switch_interval(monkeypatch):
    intervals = []

    def compute(*args):
        intervals.append(sys.getswitchinterval())
        return compute_sample(*args)

    monkeypatch.setattr(chain, "compute_sample", compute)
    before = sys.getswitchinterval()
    assert before > exact.HANDOFF_S  # CPython's 5 ms: each kernel of the numerics would wait that long for the lock
    report = compare(_empty(_Stack), torch.randn(4, 16), numerics="sample")
    assert report.bit_exact and intervals == [pytest.approx(exact.HANDOFF_S)]
    assert sys.getswitchinterval() == before


def test_a_sample_of_a_model_with_weights_uses_them():
    report = compare(_Stack(), torch.randn(4, 16), numerics="sample")
    assert report.numerics.weights == "model" and report.bit_exact


def test_seeded_values_are_deterministic_and_fill_any_size():
    meta = torch.empty(3, 70_001, dtype=torch.bfloat16, device="meta")
    a, b = seeded_like(meta, 5), seeded_like(meta, 5)
    assert torch.equal(a, b) and not torch.equal(a, seeded_like(meta, 6))
    assert a.shape == meta.shape and a.dtype == torch.bfloat16 and torch.isfinite(a.float()).all()
    weights = seeded_like(torch.empty(4, 100, dtype=torch.int8, device="meta"), 1)
    assert weights.min() >= -127 and weights.max() <= 127 and weights.abs().sum() > 0
    assert not seeded_like(torch.empty(5, dtype=torch.int64, device="meta"), 1).any()


def test_seeded_rows_are_the_rows_of_the_seeded_table():
    for meta in (torch.empty(1000, 96, dtype=torch.bfloat16, device="meta"),
                 torch.empty(96, 1000, dtype=torch.float32, device="meta").t(),
                 torch.empty(300, 5, dtype=torch.int8, device="meta")):
        ids = torch.tensor([[0, 5, meta.shape[0] - 1], [3, 3, 2]])
        assert torch.equal(seeded_rows(meta, 7, ids), seeded_like(meta, 7)[ids])


class _Embedded(torch.nn.Module):
    """A vocabulary table of 2^31 floats (8 GiB) looked up for a few tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(1 << 21, 1024)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(1024, 1024) for _ in range(2))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_sample_reads_only_the_looked_up_rows_of_an_embedding_table(monkeypatch):
    made = []

    def whole(meta: torch.Tensor, seed: int) -> torch.Tensor:
        assert meta.numel() < 1 << 24, f"a {tuple(meta.shape)} tensor was materialized whole"
        made.append(meta.numel())
        return seeded_like(meta, seed)

    monkeypatch.setattr(sample, "seeded_like", whole)
    report = compare(_empty(_Embedded), torch.tensor([[3, 1 << 20, (1 << 21) - 1]]), numerics="sample")
    assert report.bit_exact and report.numerics.weights == "seeded"
    assert max(made) == 1024 * 1024  # the layers' weights; the table's rows came from seeded_rows


def test_advise_takes_a_meta_model():
    advice = advise(_empty(lambda: Decoder(layers=6)), *decode_inputs())
    assert advice.candidates and advice.reference_us > 0


class _Branching(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w
        if y.sum() > 0:
            return y * 2
        return y


def test_a_meta_model_that_branches_on_a_value_names_the_line_and_the_fix():
    with pytest.raises(CaptureError) as error:
        compare(_empty(_Branching), torch.randn(4, 16))
    assert error.value.where.startswith(__file__ + ":")
    message = str(error.value)
    assert "timing-only" in message and "test_timing_only.py:" in message and "torch.where" in message
    assert "Traceback" not in message


class _CpuTensorInForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w + torch.ones(16, device="cpu")


def test_a_meta_model_mixing_devices_says_where_and_how_to_fix():
    with pytest.raises(CaptureError) as exc:
        compare(_empty(_CpuTensorInForward), torch.randn(4, 16))
    assert exc.value.where.startswith(__file__ + ":")


def test_numerics_choices_are_checked():
    with pytest.raises(ArgumentError) as exc:
        compare(_empty(_Stack), torch.randn(4, 16), numerics="all")
    assert exc.value.argument == "numerics"
    with pytest.raises(ArgumentError) as exc:
        compare(_Stack(), torch.randn(4, 16), numerics="some")
    assert exc.value.argument == "numerics"
    with pytest.raises(ArgumentError) as exc:
        compare(_Stack(), torch.randn(4, 16), numerics="sample", reference=_Stack())
    assert exc.value.argument == "reference"


def test_a_model_with_weights_can_be_timed_without_numerics():
    report = compare(_Stack(), torch.randn(4, 16), numerics="none")
    assert report.numerics.status is NumericsStatus.NOT_COMPUTED and report.kernels_executed == 0


class _Projection(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@pytest.mark.parametrize("target, capacity", [("a3", 64), ("910b4", 32)])
def test_a_model_larger_than_the_die_is_refused_naming_its_largest_tensor_and_the_capacity(target, capacity):
    """10**12 parameters (a config with a width off by a power of ten) on one die: refused before capture,
    naming the parameter, the die's memory_size and the fix, instead of a silently priced run."""
    with init_empty_weights():
        model = _Projection(10**6)
    with pytest.raises(DeviceMemoryError) as exc:
        compare(model, torch.empty(4, 10**6, device="meta"), target=target)
    assert (exc.value.argument, exc.value.entry, exc.value.bound) == ("model", "proj.weight", capacity * 1024**3)


def test_a_model_that_fits_beside_a_large_input_is_refused_only_when_both_exceed_the_die():
    with init_empty_weights():
        model = _Projection(4096)
    assert compare(model, torch.empty(4, 4096, device="meta")).numerics.status is NumericsStatus.NOT_COMPUTED
    with pytest.raises(DeviceMemoryError) as exc:
        compare(model, torch.empty(2**24, 4096, device="meta"))  # a 128 GiB float32 batch
    assert exc.value.entry == "input[0]"


def test_ranks_model_one_rank_of_a_sharded_deployment_so_the_whole_model_is_not_held_to_one_die():
    with init_empty_weights():
        model = _Projection(200_000)  # 149 GiB in float32: one die cannot hold it, a shard over ranks can
    report = compare(model, torch.empty(4, 200_000, device="meta"), ranks=8)
    assert report.ranks.count == 8


class _Broadcast(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.expand(2**40, 2**20) * 2


def test_an_intermediate_larger_than_the_die_is_refused_naming_it():
    """A 2**60-element product of a small input: its inputs fit, the tensors live at the run's peak do not."""
    with pytest.raises(DeviceMemoryError) as exc:
        compare(_Broadcast(), torch.empty(1, 2**20, device="meta"))
    assert exc.value.entry.startswith("the intermediates live at the peak") and exc.value.bound == 64 * 1024**3


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_an_empty_batch_is_priced_as_no_cube_work(device):
    """A matmul with no rows has no tile to hand to a core: priced, not a max() of no cores."""
    model = _Projection(64)
    if device == "meta":
        model = model.to("meta")
    report = compare(model, torch.empty(0, 64, device=device))
    assert report.variant.time_us > 0 and all(k.end_us >= k.start_us for k in report.variant.kernels)
