"""The program IR: what the captured graph asks the device to do, independent of any target.

Kernels carry their op type, the buffers they read and write, and the scope annotations resolved for
them; view ops are aliases of a buffer, not kernels. Everything is immutable so that the planner, the
simulator and the sanitizer can share one program without copying, and plain data: the IR, the planner
and the simulator import without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping, Sequence, Union

from ..vocabulary import Phase
from .events import Event
from .op import OpInfo


@dataclass(frozen=True)
class Annotations:
    """The scope attributes that apply to one kernel after nesting is resolved (see :mod:`.scopes`)."""

    sk_scope: str | None = None
    sk_options: str = ""
    stream: str | None = None
    stream_priority: int = 0
    aicore_limit: int | None = None
    vectorcore_limit: int | None = None
    sk_native: bool = False
    never_timeout: bool | None = None
    data_dump: bool = False


NO_ANNOTATIONS = Annotations()
# The stream a kernel outside every stream scope runs on, and the tag of torch.npu.default_stream().
DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one tensor value; ``nbytes`` is what a kernel moves to read or write it."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclass(frozen=True)
class Buffer:
    """A tensor value in the graph. ``alias_of`` names the buffer a view shares memory with; ``label`` is
    what the user's code calls it (the variable or expression of its source line), for messages."""

    name: str
    spec: TensorSpec
    producer: str | None
    alias_of: str | None = None
    label: str = ""

    @property
    def user_name(self) -> str:
        """The name a message uses: the user's, else the graph's."""
        return self.label or self.name


@dataclass(frozen=True)
class ModuleFrame:
    """One ``nn.Module`` call a kernel was traced inside, as Dynamo records it (``nn_module_stack``):
    ``path`` is the attribute path from the compiled model (``layers.0.attn``; ``""`` is the model
    itself) and ``type`` the module's class name; ``call_site`` is the user's line that called it
    (``path:line``, ``""`` when unknown). Time attribution and the scope advisor group kernels by these
    frames, so neither needs the model's source."""

    path: str
    type: str
    call_site: str = ""


Scalar = Union[int, float, bool, str, None, tuple]


@dataclass(frozen=True)
class Kernel:
    """One device kernel: a non-view op of the captured graph. ``flops`` and ``bytes`` are priced once,
    at capture, by the op's cost rule (:mod:`pytest_npufuse.cost`); ``input_specs`` are the shapes of
    ``inputs``, which tiling rules read. ``modules`` are the module calls it was
    traced inside, outermost first (empty for hand-built programs and the model's own top level);
    ``call`` is the torch-level call it was lowered from (``one_hot``, ``repeat_interleave``, ``Linear``;
    ``""`` when unknown), which tells the affinity advisor what the user wrote."""

    index: int
    name: str
    node: str
    op_type: str
    info: OpInfo
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_specs: tuple[TensorSpec, ...]
    annotations: Annotations
    flops: float
    bytes: int
    compute_dtype: str
    source: str
    input_specs: tuple[TensorSpec, ...] = ()
    modules: tuple[ModuleFrame, ...] = ()
    call: str = ""
    attrs: tuple[tuple[str, Scalar], ...] = ()
    """The call's scalar arguments by schema name (ints, floats, bools, strings, tuples of them), e.g. an
    MC2 dispatch's ``ep_world_size``: what the rank model needs to know beyond the tensors' shapes."""
    symbolic_sizes: bool = False
    """An input's shape or a scalar argument holds a size a dynamic-shape graph only knows at run time
    (``torch.compile(dynamic=True)``, a decode step's KV length): what GE's per-node tiling cache keys
    on changes when that size does (:mod:`pytest_npufuse.simulate.host`)."""

    def attr(self, name: str, default: "Scalar" = None) -> "Scalar":
        """The scalar argument ``name`` of the call (``default`` when it was not passed)."""
        return next((value for key, value in self.attrs if key == name), default)

    @property
    def module(self) -> str:
        """The innermost module path the kernel was traced in; ``""`` for the model's top level."""
        return self.modules[-1].path if self.modules else ""

    @property
    def stream(self) -> str:
        """The stream tag the kernel was issued on; ``default`` outside any ``npu_stream_switch``."""
        return self.annotations.stream or DEFAULT_STREAM

    def with_bytes(self, nbytes: int) -> "Kernel":
        """The same kernel pulling ``nbytes`` from HBM (L2 residency, simulate/l2.py). A field copy rather
        than ``dataclasses.replace``, which re-runs ``__init__``: the simulator prices thousands per run."""
        return self._with(bytes=nbytes)

    def with_index(self, index: int) -> Kernel:
        """The same kernel at position ``index`` of a rewritten program (Inductor's fusion, frontend/inductor.py)."""
        return self if index == self.index else self._with(index=index)

    def _with(self, **fields: object) -> Kernel:
        copy = object.__new__(Kernel)
        copy.__dict__.update(self.__dict__, **fields)
        return copy


@dataclass(frozen=True)
class StreamScope:
    """One ``npu_stream_switch`` block: kernels issued in [enter, exit) run on ``stream``."""

    stream: str
    enter: int
    exit: int


@dataclass(frozen=True)
class Program:
    """The kernels of one captured graph in program order, with every buffer they touch and every
    synchronisation the model asked for (``syncs``: :class:`~pytest_npufuse.ir.events.Event` requests at
    points of the issue order, as captured). ``phase`` says which part of a training step the graph is
    (an inference graph is a forward)."""

    kernels: tuple[Kernel, ...]
    buffers: Mapping[str, Buffer]
    inputs: tuple[str, ...]
    outputs: tuple[str | None, ...]
    syncs: tuple[Event, ...] = ()
    stream_scopes: tuple[StreamScope, ...] = ()
    phase: Phase = Phase.FORWARD

    @cached_property
    def by_name(self) -> Mapping[str, Kernel]:
        """Every kernel by its GE-style name, built once (hot loops index it directly)."""
        return {kernel.name: kernel for kernel in self.kernels}

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name`` (GE-style kernel name)."""
        return self.by_name[name]

    @cached_property
    def reads(self) -> tuple[tuple[tuple[str, int], ...], ...]:
        """Per kernel, the buffers whose memory it reads (views resolved to what they alias), each once,
        with their sizes in bytes."""
        buffers = self.buffers
        return tuple(
            tuple((storage, buffers[storage].spec.nbytes) for storage in dict.fromkeys(map(self.storage, kernel.inputs)))
            for kernel in self.kernels
        )

    @cached_property
    def footprint(self) -> int:
        """Bytes of every buffer that owns memory (views excluded): what one run touches at most."""
        return sum(buffer.spec.nbytes for buffer in self.buffers.values() if buffer.alias_of is None)

    def producer(self, buffer: str) -> Kernel | None:
        """The kernel that wrote the memory ``buffer`` lives in, or None for graph inputs."""
        name = self.buffers[self.storage(buffer)].producer
        return None if name is None else self.kernel(name)

    def storage(self, buffer: str) -> str:
        """The buffer that owns the memory ``buffer`` lives in (itself unless it is a view)."""
        while (alias := self.buffers[buffer].alias_of) is not None:
            buffer = alias
        return buffer

    def superkernel_scopes(self) -> tuple[str, ...]:
        """SuperKernel scope names in order of first use."""
        seen: dict[str, None] = {}
        for kernel in self.kernels:
            if kernel.annotations.sk_scope is not None:
                seen.setdefault(kernel.annotations.sk_scope, None)
        return tuple(seen)

    def streams(self) -> tuple[str, ...]:
        """Stream tags the program asks for, the default stream first."""
        tags = {kernel.annotations.stream for kernel in self.kernels if kernel.annotations.stream is not None}
        return ("default", *sorted(tags - {"default"}))


def compute_dtype_of(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str:
    """The dtype a kernel computes in: its first matrix/tensor input, else its first output."""
    for spec in (*inputs, *outputs):
        if spec.shape:
            return spec.dtype
    return outputs[0].dtype if outputs else "float32"
