"""Errors a user can act on.

Every stage raises a subclass of :class:`NpufuseError`. An error carries what it is about as data (its
:class:`~pytest_npufuse.vocabulary.ErrorKind`, the op, the argument, the user's source line, the file and
the place in it), and its message is rendered from those fields and the problem text in one place
(:meth:`NpufuseError.__str__`), so the pytest plugin shows a one-paragraph diagnosis instead of a
traceback from deep inside torch, and callers and tests act on the fields, not on the wording.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

from .vocabulary import ErrorKind

# Frames of a traceback under this directory are never the user's code: an error names the innermost
# frame outside it as the user's line.
PACKAGE_DIR = Path(__file__).resolve().parent


class NpufuseError(Exception):
    """Base class of every error pytest-npufuse raises on purpose.

    The first positional argument is the problem and its fix, in words; the fields say what the error is
    about where they apply (None where they do not), so a caller or a test acts on them rather than on the
    message's wording:

    * ``kind`` (a class attribute, one per error class) says what went wrong, as reports name it;
    * ``op`` is the op or API call at fault (``"npu_rms_norm"``, ``"torchair.scope.super_kernel"``);
    * ``argument`` the argument of it, or of a library call, at fault (``"scale_value"``, ``"ranks"``);
    * ``where`` the user's source line, ``path:line``, that made the call;
    * ``file`` the file at fault, ``entry`` the place in it (a JSON path such as
      ``.entries["t.py::test"].a3.variant_us``, a TOML key, a row, ``"line N"`` of a user's function), and
      ``bound`` the limit it broke (a number, in the unit the message names);
    * ``gap`` is set when the error is a :class:`Gap` of the model (a missing op, module, name or argument),
      so a check can list every gap.

    Every field is a keyword of the constructor, which sets them without calling ``Exception.__init__``
    (the arguments reach ``args`` through ``Exception.__new__``): an op's checks raise these errors while
    Dynamo traces, and Dynamo cannot trace an exception class whose ``__init__`` calls the base one."""

    kind: ClassVar[ErrorKind] = ErrorKind.ERROR
    # True where the error stands in for one the real library raises with a text of its own (a torch_npu
    # op's TORCH_CHECK, a TorchAir assertion): its str() is that text, and the op and line stay in fields.
    library_text: ClassVar[bool] = False
    gap: "Gap | None" = None

    def __init__(
        self, *args: object, op: str | None = None, argument: str | None = None, where: str | None = None,
        file: str | None = None, entry: str | None = None, bound: float | None = None,
    ) -> None:
        self.op = op
        self.argument = argument
        self.where = where
        self.file = file
        self.entry = entry
        self.bound = bound

    @property
    def problem(self) -> str:
        """What is wrong and how to fix it, as the raising code worded it, without the op or the line."""
        return str(self.args[0]) if len(self.args) == 1 else Exception.__str__(self)

    @property
    def diagnosis(self) -> str:
        """The message: the op it is about (unless the problem names it), the problem and its fix, and
        the user's line (unless the problem names it): the one place an error's fields become words, which
        the product's own reports (a failed test, ``npufuse run``) show."""
        text = self.problem
        if self.op and self.op not in text:
            text = f"{self.op}: {text}"
        if self.where and self.where not in text:
            text = f"{text.rstrip('.')} (at {self.where})."
        return text

    def __str__(self) -> str:
        """The diagnosis, or for an error that stands in for the real library's own (``library_text``),
        the problem alone: code that compares ``str(error)`` with torch_npu's text keeps working."""
        return self.problem if self.library_text else self.diagnosis


class FileFault(NpufuseError):
    """An error about a file's content: ``file``, ``entry`` and ``bound`` say where and what limit."""

    kind = ErrorKind.FILE


class CaptureError(NpufuseError):
    """The model could not be captured as one static graph (graph break, unbalanced scope, ...)."""

    kind = ErrorKind.CAPTURE


class ScopeError(NpufuseError):
    """A scope was used wrongly (bad argument, unbalanced enter/exit)."""

    kind = ErrorKind.SCOPE


class OptionsError(NpufuseError):
    """A SuperKernel options string is malformed or names an unknown option or value."""

    kind = ErrorKind.OPTIONS


class ProfileError(FileFault):
    """A hardware profile or op catalog file is missing, malformed or has a wrong-typed key."""

    kind = ErrorKind.PROFILE


class CalibrationError(FileFault):
    """A profile measured on hardware cannot calibrate a target: a file or column is missing, a number is
    written in another locale, or the profile's kernels are not the captured model's."""

    kind = ErrorKind.CALIBRATION


class NotModeledError(NpufuseError):
    """The model uses a feature this version does not model yet; refusing beats a silent wrong answer."""

    kind = ErrorKind.NOT_MODELED


class NotModeledAttributeError(NotModeledError, AttributeError):
    """A name a modeled namespace (``torch.npu``, ``torchair``, ``torchair.ge``, ``npugraph_ex``) has on a
    real NPU but the model does not provide. An AttributeError too, so ``hasattr(torch.npu, name)`` is False
    and ``getattr(torch.npu, name, None)`` is None, as for a real module; the message names what is modeled."""

    kind = ErrorKind.NOT_MODELED_NAME


class ModeledDeadlockError(NpufuseError):
    """The modeled device would wait forever (an event waited on but never recorded, or a cycle of
    waits); reported with the streams, tasks and events involved instead of hanging."""

    kind = ErrorKind.DEADLOCK


class BaselineError(FileFault):
    """A baseline or run-report file is unreadable, corrupt, or not one pytest-npufuse wrote."""

    kind = ErrorKind.BASELINE


class ArgumentError(FileFault):
    """A library call or API got an argument of the wrong kind or out of range (``HostConfig(threads=0)``,
    ``check(Model, x)`` with the class instead of an instance). ``argument`` names it where one does
    (``"ranks"``, ``"routing"``, ``"loss"``, ``"optimizer"``, ``"model"``); with a user's function at fault (a
    hook, a loss), ``file`` and ``entry`` (``"line N"``) are where it is defined."""

    kind = ErrorKind.ARGUMENT


class InputFileError(FileFault):
    """A file pytest-npufuse was asked to read cannot be read safely: it is missing, not a regular file (a
    FIFO, a device, a directory, a symlink loop), too large, not UTF-8, nested too deeply, holds a number
    too long or a key twice, or is not valid JSON or TOML. Nothing was read past the problem and nothing
    was written. The readers of :mod:`pytest_npufuse.files` raise it, or the error class of the file's
    role (:class:`BaselineError`, :class:`ProfileError`) when the caller names one."""

    kind = ErrorKind.INPUT_FILE


class OutputFileError(FileFault):
    """A file pytest-npufuse was asked to write cannot be written safely (read-only, a directory, a special
    file it was not asked to write through to, the same path as another output, a lock another process
    holds too long); nothing was written."""

    kind = ErrorKind.OUTPUT_FILE


class PathManagerError(NpufuseError, RuntimeError):
    """``torch_npu.utils._path_manager.PathManager`` could not make or remove a file or directory (torch_npu
    raises RuntimeError); the message names the path and the operating system's reason."""

    kind = ErrorKind.PATH_MANAGER


class CollectiveTimeoutError(NpufuseError, RuntimeError):
    """Some ranks of a group did not reach a collective (or the group's creation) in time: they crashed,
    exited, or took another branch. ``missing`` holds the global ranks that did not arrive."""

    kind = ErrorKind.COLLECTIVE_TIMEOUT

    missing: tuple[int, ...] = ()


class HcclSetupError(NpufuseError, ValueError):
    """An ``"hccl"`` process group cannot be set up as asked: a rendezvous variable (MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE) or HCCL_CONNECT_TIMEOUT is missing or not a number in range; ``argument``
    names the variable."""

    kind = ErrorKind.HCCL_SETUP


class DeviceMemoryError(NpufuseError):
    """A case's resident tensors (parameters, buffers and inputs; a training step's gradients and optimizer
    state too) take more than one die's device memory, so the case could not run on the die it is modeled
    on. ``entry`` names the largest such tensor and ``bound`` is the die's capacity in bytes."""

    kind = ErrorKind.DEVICE_MEMORY


class ConfigError(NpufuseError, ValueError):
    """A TorchAir ``CompilerConfig`` option set to a value TorchAir rejects (TorchAir raises ValueError)."""

    kind = ErrorKind.CONFIG


class ConfigPathError(ConfigError, FileNotFoundError):
    """A ``CompilerConfig`` path option naming a file or directory that does not exist (TorchAir raises
    FileNotFoundError; a ConfigError too, so ``except ValueError`` around option setting still catches it)."""

    kind = ErrorKind.CONFIG_PATH

    def __init__(self, *args: object, **fields: Any) -> None:
        OSError.__init__(self, *args)  # an OSError keeps its arguments in ``args`` only through its own __init__
        NpufuseError.__init__(self, *args, **fields)


class UnknownOptionError(NpufuseError, AttributeError, ValueError):
    """A ``CompilerConfig`` attribute that does not exist. TorchAir raises ValueError when one is
    assigned; reading one is an AttributeError in Python. Both are caught by either ``except``."""

    kind = ErrorKind.UNKNOWN_OPTION


class KernelError(NpufuseError):
    """An op of the model failed on the values that reached it while its outputs were computed (an index
    out of range, a NaN turned into an index): the model's own error, named at the user's source line."""

    kind = ErrorKind.KERNEL


class OpArgumentError(NpufuseError, ValueError, RuntimeError):
    """An argument of a torch_npu op or of a TorchAir / ``torch.npu`` API call has a value the real library
    rejects, or one the model does not implement; the message names the argument. A ValueError too, as
    TorchAir raises one, and a RuntimeError, as a torch_npu op's argument check (``TORCH_CHECK``) raises one,
    so scripts and tests that catch either keep working."""

    kind = ErrorKind.OP_ARGUMENT
    library_text = True


class OpAssertionError(NpufuseError, AssertionError):
    """An argument of a TorchAir API that TorchAir checks with an assertion (``set_dim_gears``) has a value
    it rejects; the message is TorchAir's. An AssertionError too, as TorchAir raises one, so scripts that
    catch it keep working."""

    kind = ErrorKind.OP_ASSERTION
    library_text = True


class OpTypeError(NpufuseError, TypeError):
    """An argument of a torch_npu op or of a TorchAir / ``torch.npu`` API call has the wrong type (a list
    where a tensor goes, an int for a bool). A TypeError too, as the real libraries raise one."""

    kind = ErrorKind.OP_TYPE
    library_text = True


class MarkerError(NpufuseError):
    """A marker was given an argument it does not take, or a value of the wrong kind."""

    kind = ErrorKind.MARKER


class MissingOpError(NpufuseError, AttributeError):
    """A torch_npu op the model calls is not among the provided CPU kernels.

    An AttributeError too, so ``hasattr(torch_npu, name)`` and ``getattr(..., default)`` keep working.
    """

    kind = ErrorKind.MISSING_OP


@dataclass(frozen=True)
class Gap:
    """One thing a checked model needs that pytest-npufuse lacks, found where the user's code asked for it.

    ``kind`` says what is missing: ``"op"`` (a torch_npu op), ``"module"`` (a torch_npu submodule),
    ``"name"`` (a public name of ``torch.npu``, ``torchair`` or ``npugraph_ex``), ``"argument"`` (an op's
    argument the CPU model does not implement) or ``"cpu kernel"`` (an op with a fake kernel but no CPU
    kernel to compute it with). ``name`` is the missing thing as the user wrote it (``torch_npu.npu_foo``,
    ``npu::my_op``), ``argument`` the refused argument, ``where`` the user's ``file:line`` ("" when
    unknown) and ``fix`` what the user can do about it."""

    kind: str
    name: str
    where: str
    fix: str
    argument: str | None = None

    @property
    def op(self) -> str | None:
        """The op the gap is about, when it is about one."""
        return self.name if self.kind in ("op", "argument", "cpu kernel") else None

    def describe(self) -> str:
        """One line of :class:`GapsError`'s list: where, what is missing, what to do."""
        if self.argument:
            what = f"argument {self.argument} of {self.name} is not implemented"
        elif self.kind == "cpu kernel":
            what = f"{self.name} has no CPU kernel"
        else:
            what = f"{self.kind} {self.name} is missing"
        return f"{self.where or 'in the model'}: {what}; {self.fix}"


class GapsError(NpufuseError):
    """Every gap a check met (:class:`Gap`), listed at once so one run shows all a model needs; ``gaps``
    holds them as data, ``stopped`` why the search for more ended early ("" when the model ran to its
    end)."""

    kind = ErrorKind.GAPS

    def __init__(self, gaps: Sequence[Gap], stopped: str = "") -> None:
        self.gaps = tuple(gaps)
        self.stopped = stopped
        lines = [f"the model needs {len(self.gaps)} thing(s) pytest-npufuse does not provide:"]
        lines += [f"  {index}. {gap.describe()}" for index, gap in enumerate(self.gaps, 1)]
        if stopped:
            lines.append(f"The model could not run on past {stopped}; more gaps may follow it.")
        lines.append(f"See {GAPS_DOCS}.")
        super().__init__()
        self.args = ("\n".join(lines),)


GAPS_DOCS = "docs/howto/write-a-case.md, section 'An op pytest-npufuse does not provide'"
"""Where the user guide says how to fill each kind of gap."""


# Warnings: the run goes on, but the user should know.


class ScopeIgnoredWarning(UserWarning):
    """A SuperKernel scope the mode does not read (e.g. ``torchair.scope.super_kernel`` in reduce-overhead)."""


class OptionsWarning(UserWarning):
    """An option that cannot do anything here: a SuperKernel entry without ``=`` (skipped, as CANN does),
    a valid option with nothing to act on (e.g. a dcci op type that is not in the scope), or a keyword
    the real API accepts and ignores (npugraph_ex's ``cache_compile(options=...)``)."""


class UnknownOpWarning(UserWarning):
    """An op type the catalog does not know was priced with the documented default."""


class BaselineWarning(UserWarning):
    """A checked case had no baseline entry; its numbers were recorded as the new baseline."""


class GradientsWarning(UserWarning):
    """A model compiled with gradients on made torch trace a backward through an op with no autograd kernel:
    said once per op, with the fix (inference under ``torch.no_grad()``), instead of torch's own warning."""
