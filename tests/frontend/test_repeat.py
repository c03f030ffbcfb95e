"""The advisor's capture of repeated layers: 2 + 3 layers captured, the rest extrapolated, and the result
equal to the full capture field by field; anything not provably repeated is captured whole."""

import sys
from pathlib import Path

import pytest
import torch

from pytest_npufuse import torch_npu
from pytest_npufuse.frontend import repeat
from pytest_npufuse.frontend.repeat import capture_program
from pytest_npufuse.frontend.backend import Capture
from pytest_npufuse.target.catalog import load_catalog

CASES = Path(__file__).parents[2] / "cases"
sys.path.insert(0, str(CASES))
from decoder_layers import Decoder, decode_inputs  # noqa: E402
from llama_layers import LlamaModel, llama_inputs  # noqa: E402

LAYERS = repeat.MIN_LAYERS


def _full(model, inputs):
    torch._dynamo.reset()
    return Capture(model, inputs, load_catalog()).graph.program


def _same(extrapolated, full):
    assert extrapolated is not None
    assert extrapolated.kernels == full.kernels
    assert list(extrapolated.buffers.items()) == list(full.buffers.items())
    assert (extrapolated.inputs, extrapolated.outputs) == (full.inputs, full.outputs)
    assert (extrapolated.syncs, extrapolated.stream_scopes) == (full.syncs, full.stream_scopes)
    assert extrapolated == full


@pytest.mark.parametrize("build", [
    # MoE layers whose shared expert runs on a side stream: syncs and stream scopes per layer
    lambda: (Decoder(layers=LAYERS, shared_stream="shared"), decode_inputs()),
    # dense layers with a final norm after the stack: a suffix that moves with the layer count
    lambda: (LlamaModel(layers=LAYERS), llama_inputs()),
], ids=["moe-side-stream", "llama"])
def test_extrapolated_program_equals_the_full_capture(build):
    model, inputs = build()
    full = _full(model, inputs)
    assert full.syncs or isinstance(model, LlamaModel)
    _same(repeat.repeated_program(model, inputs, _full), full)


def test_extrapolation_is_what_the_advisor_captures(monkeypatch):
    model, inputs = Decoder(layers=LAYERS), decode_inputs()
    layer_counts = []
    real = repeat.short_stack

    def counted(stack, count):
        layer_counts.append(count)
        return real(stack, count)

    monkeypatch.setattr(repeat, "short_stack", counted)
    program = capture_program(model, *inputs)
    assert layer_counts == list(repeat.SHORT)
    assert len(model.layers) == LAYERS  # the model has all its layers back
    assert {f.path for k in program.kernels for f in k.modules if f.path.count(".") == 1} == {
        f"layers.{i}" for i in range(LAYERS)}


class _Layer(torch.nn.Module):
    def __init__(self, width: int, index: int) -> None:
        super().__init__()
        self.layer_idx = index
        self.w = torch.nn.Parameter(torch.full((width, 8), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w[:8]) + 1


class _Stack(torch.nn.Module):
    def __init__(self, widths, by_count: bool = False) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_Layer(w, i) for i, w in enumerate(widths))
        self.count = len(widths) if by_count else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = [self.layers[i] for i in range(self.count)] if self.count else self.layers
        for layer in layers:
            x = layer(x)
        return x.sum()


def test_a_layer_index_attribute_is_still_a_repeated_stack():
    model, inputs = _Stack([8] * LAYERS), (torch.ones(2, 8),)
    assert repeat.layer_stack(model).layers == LAYERS
    _same(repeat.repeated_program(model, inputs, _full), _full(model, inputs))


def test_layers_that_differ_are_captured_whole():
    model = _Stack([8] * (LAYERS - 1) + [16])
    assert repeat.layer_stack(model) is None
    assert repeat.repeated_program(model, (torch.ones(2, 8),), _full) is None


def test_a_short_stack_is_captured_whole():
    assert repeat.layer_stack(_Stack([8] * (LAYERS - 1))) is None


def test_a_forward_that_counts_its_layers_falls_back_and_keeps_them():
    model = _Stack([8] * LAYERS, by_count=True)
    assert repeat.layer_stack(model) is not None
    assert repeat.repeated_program(model, (torch.ones(2, 8),), _full) is None  # layer 2 of 2 does not exist
    assert len(model.layers) == LAYERS
    assert len(capture_program(model, torch.ones(2, 8)).kernels) == len(_full(model, (torch.ones(2, 8),)).kernels)


def test_layers_holding_different_functions_are_captured_whole():
    model = _Stack([8] * LAYERS)
    for i, layer in enumerate(model.layers):
        layer.act = torch.tanh if i == LAYERS - 1 else torch.relu
    assert repeat.layer_stack(model) is None


def test_layers_before_the_run_are_kept_and_the_run_extrapolated():
    """DeepSeek-V3's shape: a few dense layers, then a long run of MoE layers (here wider ones first)."""
    model, inputs = _Stack([16] * 3 + [8] * LAYERS), (torch.ones(2, 8),)
    stack = repeat.layer_stack(model)
    assert (stack.start, stack.layers, stack.size) == (3, LAYERS, 3 + LAYERS)
    assert stack.kinds() == (tuple(range(3)), tuple(range(3, 3 + LAYERS)))
    _same(repeat.repeated_program(model, inputs, _full), _full(model, inputs))


def test_layers_after_the_run_are_kept_and_the_run_extrapolated():
    model, inputs = _Stack([8] * LAYERS + [16] * 2), (torch.ones(2, 8),)
    stack = repeat.layer_stack(model)
    assert (stack.start, stack.layers) == (0, LAYERS)
    _same(repeat.repeated_program(model, inputs, _full), _full(model, inputs))


class _CachedLayer(torch.nn.Module):
    """A layer that overwrites its own state in place with a value computed from its input (a copy the
    device runs too: unlike a cache update, no op of the graph can write it in place)."""

    def __init__(self, width: int, index: int) -> None:
        super().__init__()
        self.layer_idx = index
        self.w = torch.nn.Parameter(torch.full((width, 8), 0.5))

    def forward(self, x: torch.Tensor, caches) -> torch.Tensor:
        caches[self.layer_idx].copy_(x[:1].expand(4, 8))
        return torch.relu(x @ self.w[:8]) + caches[self.layer_idx].sum(0)


class _CachedStack(torch.nn.Module):
    def __init__(self, widths) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_CachedLayer(w, i) for i, w in enumerate(widths))

    def forward(self, x: torch.Tensor, caches) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, caches)
        return x.sum()


def test_layers_that_write_their_caches_in_place_are_extrapolated():
    """The graph ends with one copy back into each mutated input (each layer's cache): a second region of
    per-layer records after the suffix."""
    widths = [16] * 2 + [8] * LAYERS
    model = _CachedStack(widths)
    inputs = (torch.ones(2, 8), [torch.zeros(4, 8) for _ in widths])
    full = _full(model, inputs)
    assert sum(k.op_type == "aten::copy_" for k in full.kernels) == len(widths)
    _same(repeat.repeated_program(model, inputs, _full), full)


class _ScatteredLayer(torch.nn.Module):
    """A decode layer's KV-cache write: ``npu_scatter_nd_update_`` into its own cache, which re-inplacing
    turns into one in-place kernel, so the graph's only trace of the write is the cache's new value."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.layer_idx = index
        self.w = torch.nn.Parameter(torch.full((8, 8), 0.5))

    def forward(self, x: torch.Tensor, caches, slots) -> torch.Tensor:
        torch_npu.npu_scatter_nd_update_(caches[self.layer_idx], slots, x[:1])
        return torch.relu(x @ self.w) + caches[self.layer_idx].sum(0)


class _ScatteredStack(torch.nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(_ScatteredLayer(i) for i in range(layers))

    def forward(self, x: torch.Tensor, caches, slots) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, caches, slots)
        return x.sum()


def test_layers_whose_cache_writes_are_reinplaced_are_extrapolated():
    model = _ScatteredStack(LAYERS)
    inputs = (torch.ones(2, 8), [torch.zeros(4, 8) for _ in range(LAYERS)], torch.tensor([[1]]))
    full = _full(model, inputs)
    assert not any(k.op_type.startswith("aten::copy") for k in full.kernels)  # every write is in place
    _same(repeat.repeated_program(model, inputs, _full), full)
