"""Capture of a model whose decoder layers repeat: two short captures instead of one long one.

Dynamo and AOT trace every op of every layer, so one capture of a 61-layer decode step costs tens of
seconds although its layers are the same code on the same shapes. When the layer stack holds a long
run of provably identical layers, the model is captured with only 2 and only 3 layers of that run (the
layers before and after the run kept, e.g. DeepSeek-V3's 3 dense layers before its 58 MoE layers) and
the full program is extrapolated from the two. Every entry point that only needs the program
(``capture``, ``advise``, and the timing of ``compare`` when numerics are not computed on every layer)
captures this way. What has to hold, or the full capture is taken instead:

- the model holds an ``nn.ModuleList``/``nn.Sequential`` with a run of at least :data:`MIN_LAYERS`
  consecutive layers of one class with the same parameter and buffer names, shapes and dtypes, the same
  plain attributes (an int attribute may also be the layer's own index in the container, as ``layer_idx``
  is in the public LLaMA code) and no hooks;
- both short captures succeed (a forward that indexes layers by a configured count fails and falls back);
- the captured programs are one prefix, one period per layer of the run and one suffix: the kernels of
  run layer ``j`` (by their ``nn_module_stack`` path ``<stack>.<index>``) start one fixed period after
  those of layer ``j - 1``, and 3 run layers have exactly one period more than 2;
- everything the two captures record is the same up to the numbers in it (kernel and buffer names,
  indices, module paths, sync positions), which are affine in the layer index ``j`` and the layer
  count ``N``: FX and GE number names by counters, so layer ``j`` of ``N`` is layer 1 of 3 moved by
  ``j - 1`` periods and ``N - 3`` extra layers. The first run layer is taken as captured (the first use
  of an op name carries no counter) and so are the prefix and suffix, moved by the extra layers.

The result equals the full capture field by field (tests/frontend/test_repeat.py compares them).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, fields
from enum import Enum
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from ..ir.events import Event
from ..ir.program import Annotations, Buffer, Kernel, ModuleFrame, Program, StreamScope, TensorSpec
from ..target.catalog import OpCatalog, load_catalog
from .backend import Capture

MIN_LAYERS = 6
"""Below this a full capture traces no more layers than the two short ones (2 + 3) together."""

SHORT = (2, 3)
"""The run lengths of the two short captures."""

Capturer = Callable[[Any, Sequence[Any]], Program]


@dataclass(frozen=True)
class Stack:
    """The repeated layers: ``parent.<attr>`` is the container, ``path`` its module path in kernels;
    ``layers`` identical layers start at index ``start`` of its ``size`` layers."""

    parent: torch.nn.Module
    attr: str
    path: str
    layers: int
    start: int = 0
    size: int = 0

    @property
    def container(self) -> Sequence[torch.nn.Module]:
        return getattr(self.parent, self.attr)

    def kinds(self) -> tuple[tuple[int, ...], ...]:
        """The container's layers grouped by kind (provably identical layers), each group its indices."""
        return layer_kinds(list(self.container))


def layer_stack(model: Any) -> Stack | None:
    """The model's longest run of provably identical layers in one container (None when none is worth it)."""
    best: Stack | None = None
    for stack in _containers(model):
        if stack.layers >= MIN_LAYERS and (best is None or stack.layers > best.layers):
            best = stack
    return best


def layer_container(model: Any) -> Stack | None:
    """The model's container of the most layers (at least :data:`MIN_LAYERS`), with its longest run: the
    decoder stack, whether or not its layers repeat."""
    best: Stack | None = None
    for stack in _containers(model):
        if best is None or stack.size > best.size:
            best = stack
    return best


def _containers(model: Any) -> Iterator[Stack]:
    """Every ``ModuleList``/``Sequential`` of at least :data:`MIN_LAYERS` layers, with its longest run."""
    if not isinstance(model, torch.nn.Module):
        return
    for path, module in model.named_modules():
        if path and isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)) and len(module) >= MIN_LAYERS:
            start, length = _longest_run(list(module))
            parent_path, _, attr = path.rpartition(".")
            yield Stack(model.get_submodule(parent_path), attr, path, length, start, len(module))


def _longest_run(layers: Sequence[torch.nn.Module]) -> tuple[int, int]:
    """(start, length) of the longest run of consecutive identical layers (the first of equal ones)."""
    shapes = [_shape_of(layer) for layer in layers]
    numbers = [_int_attributes(layer) for layer in layers]
    best, start = (0, 0), 0
    for end in range(1, len(layers) + 1):
        if end == len(layers) or shapes[end] is None or shapes[end] != shapes[start] or not _same_ints(numbers, start, end):
            if shapes[start] is not None and end - start > best[1]:
                best = (start, end - start)
            start = end
    return best


def _same_ints(numbers: Sequence[dict[str, int]], start: int, end: int) -> bool:
    """Whether layer ``end`` continues the run from ``start``: each int attribute keeps the run's value,
    or is each layer's own index in the container."""
    for key, value in numbers[start].items():
        other = numbers[end].get(key)
        if other == value and all(numbers[i].get(key) == value for i in range(start + 1, end)):
            continue
        if not all(numbers[i].get(key) == i for i in range(start, end + 1)):
            return False
    return numbers[end].keys() == numbers[start].keys()


def layer_kinds(layers: Sequence[torch.nn.Module]) -> tuple[tuple[int, ...], ...]:
    """Indices of ``layers`` grouped by kind, in order of first appearance: two layers are of one kind when
    they are the same code on the same parameter shapes (:func:`_shape_of`; a layer with hooks is a kind
    of its own)."""
    kinds: dict[Any, list[int]] = {}
    for index, layer in enumerate(layers):
        shape = _shape_of(layer)
        kinds.setdefault(("hooked", index) if shape is None else shape, []).append(index)
    return tuple(tuple(kind) for kind in kinds.values())


def _shape_of(layer: torch.nn.Module) -> tuple[Any, ...] | None:
    """What a trace of ``layer`` depends on apart from int attributes; None when it has hooks."""
    parts: list[Any] = []
    for name, module in layer.named_modules():
        if module._forward_hooks or module._forward_pre_hooks:
            return None
        plain = tuple(sorted((key, _plain(value)) for key, value in vars(module).items()
                             if not key.startswith("_") and key != "training" and not _is_int(value)))
        parts.append((name, type(module), plain))
    parts += [(name, tuple(p.shape), p.dtype, p.requires_grad) for name, p in layer.named_parameters()]
    parts += [(name, tuple(b.shape), b.dtype) for name, b in layer.named_buffers()]
    return tuple(parts)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_attributes(layer: torch.nn.Module) -> dict[str, int]:
    return {f"{name}.{key}": value for name, module in layer.named_modules()
            for key, value in vars(module).items() if not key.startswith("_") and _is_int(value)}


def _plain(value: Any) -> Any:
    """An attribute as the comparison sees it: plain values and containers of them by value, tensors by
    shape and dtype, anything else (functions, configs, helpers) by identity, so layers match only when
    they share it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_plain(v) for v in value))
    return ("object", id(value))


@contextlib.contextmanager
def short_stack(stack: Stack, count: int) -> Iterator[None]:
    """The model with only ``count`` layers of its run (the layers around the run kept), restored
    afterwards whatever happens."""
    full = stack.container
    end = stack.start + stack.layers
    setattr(stack.parent, stack.attr, full[: stack.start + count] + full[end:] if end < len(full) else full[: stack.start + count])
    try:
        yield
    finally:
        setattr(stack.parent, stack.attr, full)


@contextlib.contextmanager
def only_layers(stack: Stack, indices: Sequence[int]) -> Iterator[None]:
    """The model with only the container's layers at ``indices``, in order, restored afterwards."""
    full = stack.container
    setattr(stack.parent, stack.attr, type(full)(*[full[i] for i in indices]) if isinstance(full, torch.nn.Sequential)
            else torch.nn.ModuleList([full[i] for i in indices]))
    try:
        yield
    finally:
        setattr(stack.parent, stack.attr, full)


def repeated_program(model: Any, inputs: Sequence[Any], capture: Capturer) -> Program | None:
    """The program of ``model`` extrapolated from captures with 2 and 3 layers of its run, or None
    when its layers are not provably repeated (then the caller captures it whole)."""
    stack = layer_stack(model)
    if stack is None:
        return None
    short = []
    for count in SHORT:
        with short_stack(stack, count):
            try:
                short.append(capture(model, inputs))
            except Exception:  # noqa: BLE001 - any failure of a short capture means: capture the model whole
                return None
    return extrapolate(short[0], short[1], stack.path, stack.layers, stack.start)


def capture_program(model: Callable[..., Any], *inputs: Any, catalog: OpCatalog | None = None) -> Program:
    """The program of ``model`` on ``inputs``, captured once (one Dynamo + AOT trace, no numerics). A model
    with a long run of provably identical layers is captured with 2 and 3 layers of the run and the
    rest extrapolated: the same program, a fraction of the tracing."""
    catalog = catalog or load_catalog()

    def capture(model: Callable[..., Any], inputs: Sequence[Any]) -> Program:
        torch._dynamo.reset()
        return Capture(model, inputs, catalog).graph.program

    return repeated_program(model, inputs, capture) or capture(model, inputs)


# -- extrapolation -------------------------------------------------------------------------------------

PREFIX, SUFFIX = -1, 1 << 30  # slots around the layer blocks 0..N-1
MAIN, WRITEBACK = 0, 1
"""Regions of a program: the kernels in program order, then the copies that write each mutated graph input
back (a KV cache a layer updates in place), in the order of the layers that own those inputs."""
_PROGRAM_FIELDS = ("kernels", "buffers", "inputs", "outputs", "syncs", "stream_scopes", "phase")
Label = tuple[int, int]  # (region, slot)


def extrapolate(two: Program, three: Program, path: str, layers: int, first: int = 0) -> Program | None:
    """The program with ``layers`` run layers from the ones with 2 and 3, or None when they are not one
    prefix, one period per layer and one suffix with affine numbers (see the module docstring); the
    run starts at index ``first`` of the container at ``path``."""
    if tuple(f.name for f in fields(Program)) != _PROGRAM_FIELDS:
        return None  # a Program field this module does not rebuild: never drop it silently
    if two.phase != three.phase:
        return None
    cut2, cut3 = _Cut.of(two, path, 2, first), _Cut.of(three, path, 3, first)
    if cut2 is None or cut3 is None or cut2.start != cut3.start or cut2.period != cut3.period:
        return None
    built: dict[str, list[Any]] = {}
    for sequence in _SEQUENCES:
        records2, records3 = cut2.segments(sequence), cut3.segments(sequence)
        grown = None if records2 is None or records3 is None else _grow(records2, records3, layers)
        if grown is None:
            return None
        built[sequence] = grown
    (outputs,) = built["outputs"]
    buffers = [*built["input_buffers"], *built["buffers"]]
    program = Program(
        tuple(built["kernels"]), MappingProxyType({b.name: b for b in buffers}), tuple(built["inputs"]),
        outputs, tuple(built["syncs"]), tuple(built["stream_scopes"]), three.phase,
    )
    consistent = (
        [k.index for k in program.kernels] == list(range(len(program.kernels)))
        and len(program.by_name) == len(program.kernels) and len(program.buffers) == len(buffers)
    )
    return program if consistent else None


@dataclass(frozen=True)
class _Cut:
    """Where the layer blocks of one captured program lie: kernels [start + j*period, start + (j+1)*period),
    and from ``writebacks`` on, the copies back into mutated graph inputs, labelled by their owners."""

    program: Program
    start: int
    period: int
    layers: int
    input_buffers: int
    writebacks: int
    labels: tuple[Label, ...]
    uses: Mapping[str, int]  # the first kernel reading each buffer's memory

    @classmethod
    def of(cls, program: Program, path: str, layers: int, first: int = 0) -> _Cut | None:
        """The cut of ``program`` whose run holds ``layers`` layers from index ``first`` of the container;
        layers before the run belong to the prefix, layers after it to the suffix."""
        pattern = re.compile(re.escape(path) + r"\.(\d+)")
        firsts: dict[int, int] = {}
        owner: list[int | None] = []
        for kernel in program.kernels:
            index = next((int(m.group(1)) for f in kernel.modules if (m := pattern.fullmatch(f.path))), None)
            layer = None if index is None else (PREFIX if index < first else SUFFIX if index >= first + layers else index - first)
            owner.append(layer)
            if layer is not None:
                firsts.setdefault(layer, kernel.index)
        if sorted(set(firsts) - {PREFIX, SUFFIX}) != list(range(layers)):
            return None
        inputs = [name for name in program.inputs if name in program.buffers]
        if list(program.buffers)[:len(inputs)] != inputs:
            return None  # graph inputs are not the first buffers: the program could not be put back in order
        start, period = firsts[0], firsts[1] - firsts[0]
        if any(firsts[j] != start + j * period for j in range(layers)):
            return None
        writebacks = _writebacks_from(program)
        main = [_main_slot(i, start, period, layers) for i in range(writebacks)]
        if any(layer is not None and main[i] != layer for i, layer in enumerate(owner[:writebacks])):
            return None
        uses = _first_uses(program)
        tail = tuple(_written_back(program, uses, main, kernel.node) for kernel in program.kernels[writebacks:])
        labels = tuple((MAIN, slot) for slot in main) + tail
        return cls(program, start, period, layers, len(inputs), writebacks, labels, MappingProxyType(uses))

    def written_back(self, name: str) -> Label:
        return _written_back(self.program, self.uses, [slot for _, slot in self.labels[:self.writebacks]], name)

    def label(self, position: int) -> Label:
        """The segment of the kernel at ``position`` (``len(kernels)`` is past the end: the last segment)."""
        if position < len(self.labels):
            return self.labels[position]
        return self.labels[-1] if self.labels else (MAIN, SUFFIX)

    def segments(self, sequence: str) -> dict[Label, list[Any]] | None:
        """The records of ``sequence`` by segment, in order; None when a segment is not contiguous."""
        labelled = list(_LABELLERS[sequence](self))
        order = [label for label, _ in labelled]
        if order != sorted(order):
            return None
        grouped: dict[Label, list[Any]] = {}
        for label, record in labelled:
            grouped.setdefault(label, []).append(record)
        return grouped


def _main_slot(position: int, start: int, period: int, layers: int) -> int:
    if position < start:
        return PREFIX
    block = (position - start) // period
    return block if block < layers else SUFFIX


def _written_back(program: Program, uses: Mapping[str, int], main: Sequence[int], name: str) -> Label:
    """The write-back region's label of a buffer that writes into a graph input: the slot (in ``main``, the
    slots of the kernels before the write-backs) of the layer that first uses that input, its own cache,
    or the suffix for an input no layer reads."""
    used = uses.get(program.storage(name))
    return WRITEBACK, main[used] if used is not None and used < len(main) else SUFFIX


def _writebacks_from(program: Program) -> int:
    """Where the trailing copies back into mutated graph inputs begin (``len(kernels)`` when there are none):
    AOT ends a graph that mutates its inputs with one ``copy_`` per mutated input."""
    inputs = set(program.inputs)
    position = len(program.kernels)
    while position and (written := program.buffers.get(program.kernels[position - 1].node)) is not None \
            and written.alias_of in inputs:
        position -= 1
    return position


def _kernels(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    for kernel in cut.program.kernels:
        yield cut.label(kernel.index), kernel


def _first_uses(program: Program) -> dict[str, int]:
    """The first kernel reading each buffer's memory (through any view of it)."""
    uses: dict[str, int] = {}
    for kernel in program.kernels:
        for name in kernel.inputs:
            uses.setdefault(program.storage(name), kernel.index)
    return uses


def _inputs(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    """Graph inputs (parameters and user inputs, numbered by first use); an unused one goes with the one before."""
    uses, label = _first_uses(cut.program), (MAIN, PREFIX)
    for name in cut.program.inputs:
        label = (MAIN, cut.label(uses[name])[1]) if name in uses else label
        yield label, name


def _input_buffers(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    """The buffers of graph inputs, labelled as :func:`_inputs` (they come first in graph order)."""
    labels = dict((name, label) for label, name in _inputs(cut))
    for name in cut.program.inputs:
        if name in cut.program.buffers:
            yield labels[name], cut.program.buffers[name]


def _buffers(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    """Every other buffer with the kernel that writes it; a view (or constant) with the next kernel in
    graph order; a trailing new value of a graph input that no kernel writes (a re-inplaced cache write)
    with the write-backs, in its layer's slot."""
    program = cut.program
    written = {name: kernel.index for kernel in program.kernels for name in (kernel.node, *kernel.outputs)}
    pending: list[Buffer] = []
    for buffer in list(program.buffers.values())[cut.input_buffers:]:
        if buffer.name in written:
            label = cut.label(written[buffer.name])
            yield from ((label, view) for view in pending)
            pending = []
            yield label, buffer
        else:
            pending.append(buffer)
    inputs = set(program.inputs)
    for view in pending:
        into_input = view.alias_of in inputs and view.producer is None
        yield (cut.written_back(view.name) if into_input else cut.label(len(program.kernels))), view


def _syncs(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    for point in cut.program.syncs:
        yield cut.label(point.position), point


def _stream_scopes(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    for scope in cut.program.stream_scopes:
        yield cut.label(scope.enter), scope


def _outputs(cut: _Cut) -> Iterator[tuple[Label, Any]]:
    yield (MAIN, SUFFIX), cut.program.outputs


_LABELLERS: dict[str, Callable[[_Cut], Iterator[tuple[Label, Any]]]] = {
    "kernels": _kernels, "inputs": _inputs, "input_buffers": _input_buffers, "buffers": _buffers, "syncs": _syncs,
    "stream_scopes": _stream_scopes, "outputs": _outputs,
}
_SEQUENCES = tuple(_LABELLERS)


def _grow(two: dict[Label, list[Any]], three: dict[Label, list[Any]], layers: int) -> list[Any] | None:
    """One sequence of the ``layers``-layer program, region by region: prefix, layer 0 and suffix moved by
    the extra layers; layer ``j >= 1`` is layer 1 of three moved by ``j - 1`` periods and by the extra layers."""
    out: list[Any] = []
    for region in sorted({label[0] for label in (*two, *three)}):
        grown = _grow_region(
            {slot: records for (r, slot), records in two.items() if r == region},
            {slot: records for (r, slot), records in three.items() if r == region}, layers,
        )
        if grown is None:
            return None
        out += grown
    return out


def _grow_region(two: dict[int, list[Any]], three: dict[int, list[Any]], layers: int) -> list[Any] | None:
    moved: dict[int, _Numbers] = {}
    for label in (PREFIX, 0, 1, SUFFIX):
        a, b = _Numbers.of(two.get(label, [])), _Numbers.of(three.get(label, []))
        if a.skeleton != b.skeleton:
            return None
        moved[label] = b.plus(b.minus(a), layers - 3)
    last = _Numbers.of(three.get(2, []))
    if last.skeleton != moved[1].skeleton:
        return None
    period = last.minus(_Numbers.of(three.get(1, [])))
    blocks = [moved[PREFIX], moved[0], *(moved[1].plus(period, j - 1) for j in range(1, layers)), moved[SUFFIX]]
    out: list[Any] = []
    for block in blocks:
        records = block.build()
        if records is None:
            return None
        out += records
    return out


# -- records as a skeleton and the numbers in it ----------------------------------------------------

_DIGITS = re.compile(r"(\d+)")
_COUNTER = re.compile(r"(.*)_(\d+)", re.DOTALL)
_RECORDS = (Kernel, Buffer, TensorSpec, ModuleFrame, Annotations, Event, StreamScope)
_ATOMS = frozenset({"attrs"})  # record fields compared whole: a call's scalar arguments are the same in every layer


@dataclass(frozen=True)
class _Numbers:
    """Records split into what must match exactly (the skeleton) and the ints in them, in order."""

    records: tuple[Any, ...]
    skeleton: tuple[Any, ...]
    values: tuple[int, ...]

    @classmethod
    def of(cls, records: Sequence[Any]) -> _Numbers:
        values: list[int] = []
        skeleton = tuple(_skeleton(record, values) for record in records)
        return cls(tuple(records), skeleton, tuple(values))

    def minus(self, other: _Numbers) -> tuple[int, ...]:
        return tuple(a - b for a, b in zip(self.values, other.values))

    def plus(self, delta: tuple[int, ...], times: int) -> _Numbers:
        return _Numbers(self.records, self.skeleton, tuple(v + d * times for v, d in zip(self.values, delta)))

    def build(self) -> list[Any] | None:
        """The records with these numbers; None when a number in a name would go negative."""
        if any(v < 0 for v in self.values):
            return None
        numbers = iter(self.values)
        frames: dict[ModuleFrame, ModuleFrame] = {}
        return [_rebuild(record, numbers, frames) for record in self.records]


def _skeleton(value: Any, values: list[int]) -> Any:
    if isinstance(value, Enum):
        return ("atom", value)  # a vocabulary word (an event's kind) is a str, but never numbered
    if isinstance(value, str):
        base, counter, _ = _counted(value)
        parts = _DIGITS.split(base)
        for i in range(1, len(parts), 2):
            if _is_number(parts[i]):
                values.append(int(parts[i]))
                parts[i] = ""
        values.append(counter)
        return ("str", tuple(parts))
    if _is_int(value):
        values.append(value)
        return ("int",)
    if isinstance(value, _RECORDS):
        return (type(value), tuple(
            ("atom", getattr(value, f.name)) if f.name in _ATOMS else _skeleton(getattr(value, f.name), values)
            for f in fields(value)
        ))
    if isinstance(value, tuple):
        return ("tuple", tuple(_skeleton(item, values) for item in value))
    return ("atom", value)  # compared as a whole: catalog entries, floats, flags


def _counted(name: str) -> tuple[str, int, bool]:
    """A name as FX and GE number it: base, counter and whether the counter is written. The first use
    of a name has none (``add``, then ``add_1``), so it counts as 0 and a counted name matches it."""
    match = _COUNTER.fullmatch(name)
    if match is None or not _is_number(match.group(2)):
        return name, 0, False
    return match.group(1), int(match.group(2)), True


def _is_number(digits: str) -> bool:
    """Digits that a counter wrote: no leading zero (``007`` is text)."""
    return digits == "0" or not digits.startswith("0")


def _rebuild(value: Any, numbers: Iterator[int], frames: dict[ModuleFrame, ModuleFrame]) -> Any:
    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        base, _, explicit = _counted(value)
        parts = _DIGITS.split(base)
        for i in range(1, len(parts), 2):
            parts[i] = str(next(numbers)) if _is_number(parts[i]) else parts[i]
        counter = next(numbers)
        return "".join(parts) + (f"_{counter}" if explicit or counter else "")
    if _is_int(value):
        return next(numbers)
    if isinstance(value, _RECORDS):
        rebuilt = type(value)(**{
            f.name: getattr(value, f.name) if f.name in _ATOMS else _rebuild(getattr(value, f.name), numbers, frames)
            for f in fields(value)
        })
        return frames.setdefault(rebuilt, rebuilt) if isinstance(rebuilt, ModuleFrame) else rebuilt
    if isinstance(value, tuple):
        return tuple(_rebuild(item, numbers, frames) for item in value)
    return value
