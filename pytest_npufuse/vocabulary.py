"""Closed vocabularies shared by several stages: the modes a graph runs in, the engines a kernel runs on and
the phases of a training step.

Every vocabulary of the project (these, and the stage-owned ones such as ``fusion.ScopeOutcome``,
``sanitize.RaceKind``, ``simulate.Bound`` and ``events.EventKind``) is a :class:`Vocabulary`: a ``str``
enum whose members compare equal to, print as and serialise to JSON as their string values, so reports,
baseline files and user code that compare with plain strings see exactly the words they saw before.
"""

from __future__ import annotations

from enum import Enum


class Vocabulary(str, Enum):
    """A ``str`` enum that reads as its value everywhere (``str``, ``format``, ``repr``, JSON) and hashes as
    it too, so a member and its plain string find the same dict entry (``Enum`` hashes the member name)."""

    __hash__ = str.__hash__
    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__


class Mode(Vocabulary):
    """How a graph is executed: TorchAir's three compile modes (npugraph_ex is TorchAir's aclgraph backend
    of today, reduce-overhead its deprecated predecessor), and the op-by-op ``eager`` reference."""

    MAX_AUTOTUNE = "max-autotune"
    REDUCE_OVERHEAD = "reduce-overhead"
    NPUGRAPH_EX = "npugraph_ex"
    EAGER = "eager"

    @property
    def aclgraph(self) -> bool:
        """Captured into an NPU graph and replayed (streams ordered by events and TorchAir's closure)."""
        return self in (Mode.REDUCE_OVERHEAD, Mode.NPUGRAPH_EX)


# The modes a TorchAir CompilerConfig can name (eager is ours, not a config value).
CONFIG_MODES = (Mode.MAX_AUTOTUNE.value, Mode.REDUCE_OVERHEAD.value, Mode.NPUGRAPH_EX.value)


class Engine(Vocabulary):
    """The engine an op runs on (docs/reference/ops.md: the op catalog's ``engine`` key)."""

    CUBE = "cube"
    VECTOR = "vector"
    AICPU = "aicpu"
    HOST = "host"
    COMM = "comm"
    DMA = "dma"


class NumericsStatus(Vocabulary):
    """How much of a model's numbers a check computed (docs/numerics.md: a report's ``numerics``)."""

    COMPUTED = "computed"
    SAMPLED = "sampled"
    NOT_COMPUTED = "not computed"
    PARTIAL = "partial"


class MissingOps(Vocabulary):
    """What a check does about an op it cannot compute on the CPU (docs/reference/python-api.md: ``missing_ops=``):
    ``error`` stops after listing every gap; ``timing-only`` times an op that has a fake kernel but no CPU kernel and
    leaves the outputs computed from it uncompared (``numerics`` says ``partial``)."""

    ERROR = "error"
    TIMING_ONLY = "timing-only"


class Unfusable(Vocabulary):
    """Why a SuperKernel cannot call an op as a sub-kernel (the op catalog's ``unfusable`` key).

    A SuperKernel calls already-compiled Ascend C AI Core kernels; an op that is anything else splits
    the scope (docs/sources.md#torchair-2-3, docs/sources.md#hw-4-1). An unfusable entry without the key gets its
    engine's reason (:func:`~pytest_npufuse.target.catalog.unfusable_reason`), and a Cube or Vector one is a TBE kernel.
    """

    TBE = "tbe"
    COPY = "copy"
    AICPU = "aicpu"
    AICPU_DTYPE = "aicpu-dtype"
    HOST = "host"
    COMM = "comm"
    MC2 = "mc2"
    ATB = "atb"
    PENDING = "pending"
    UNVERIFIED = "unverified"
    UNKNOWN = "unknown"


class Phase(Vocabulary):
    """Which part of a step a captured graph is (docs/training.md): the forward (with the loss), the
    backward AOTAutograd derives from it, or a compiled optimizer step. An inference graph is a forward."""

    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"


class ErrorKind(Vocabulary):
    """What an :class:`~pytest_npufuse.errors.NpufuseError` is about, one kind per error class, as reports
    and callers name it: the error's ``kind`` field."""

    ERROR = "error"
    FILE = "file"
    CAPTURE = "capture"
    SCOPE = "scope"
    OPTIONS = "options"
    PROFILE = "profile"
    CALIBRATION = "calibration"
    NOT_MODELED = "not-modeled"
    NOT_MODELED_NAME = "not-modeled-name"
    DEADLOCK = "deadlock"
    BASELINE = "baseline"
    ARGUMENT = "argument"
    INPUT_FILE = "input-file"
    OUTPUT_FILE = "output-file"
    CONFIG = "config"
    CONFIG_PATH = "config-path"
    UNKNOWN_OPTION = "unknown-option"
    KERNEL = "kernel"
    OP_ARGUMENT = "op-argument"
    OP_ASSERTION = "op-assertion"
    OP_TYPE = "op-type"
    MARKER = "marker"
    MISSING_OP = "missing-op"
    GAPS = "gaps"
    PATH_MANAGER = "path-manager"
    COLLECTIVE_TIMEOUT = "collective-timeout"
    DEVICE_MEMORY = "device-memory"
    HCCL_SETUP = "hccl-setup"
