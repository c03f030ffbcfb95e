"""Errors a user can act on.

Every stage raises a subclass of :class:`NpufuseError` whose message names the thing that is wrong
(scope, option, op, file, key) and how to fix it, so the pytest plugin can show it as a one-paragraph
diagnosis instead of a traceback from deep inside torch.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

# Frames of a traceback under this directory are never the user's code: an error names the innermost
# frame outside it as the user's line.
PACKAGE_DIR = Path(__file__).resolve().parent


class NpufuseError(Exception):
    """Base class of every error pytest-npufuse raises on purpose.

    Fields say what the error is about where they apply (None where they do not), so a caller or a
    test acts on them rather than on the message's wording: ``file`` is the file at fault, ``entry``
    the place in it (a JSON path such as ``.entries["t.py::test"].a3.variant_us``, a TOML key, a
    row), ``bound`` the limit it broke (a number, in the unit the message names). Errors about a file's
    content take them as keywords (:class:`FileFault`). ``gap`` is set when the error is a :class:`Gap` of
    the model (a missing op, module, name or argument), so a check can list every gap."""

    gap: "Gap | None" = None
    file: str | None = None
    entry: str | None = None
    bound: float | None = None


class FileFault(NpufuseError):
    """An error about a file's content, whose constructor takes the ``file``, ``entry`` and ``bound``
    fields. Kept apart from :class:`NpufuseError` itself: an op's checks raise their errors while
    Dynamo traces, and Dynamo cannot trace an exception class whose ``__init__`` calls the base one."""

    def __init__(
        self, *args: object, file: str | None = None, entry: str | None = None, bound: float | None = None
    ) -> None:
        super().__init__(*args)
        self.file = file
        self.entry = entry
        self.bound = bound


class CaptureError(NpufuseError):
    """The model could not be captured as one static graph (graph break, unbalanced scope, ...)."""


class ScopeError(NpufuseError):
    """A scope was used wrongly (bad argument, unbalanced enter/exit)."""


class OptionsError(NpufuseError):
    """A SuperKernel options string is malformed or names an unknown option or value."""


class ProfileError(FileFault):
    """A hardware profile or op catalog file is missing, malformed or has a wrong-typed key."""


class CalibrationError(FileFault):
    """A profile measured on hardware cannot calibrate a target: a file or column is missing, a number is
    written in another locale, or the profile's kernels are not the captured model's."""


class NotModeledError(NpufuseError):
    """The model uses a feature this version does not model yet; refusing beats a silent wrong answer."""


class NotModeledAttributeError(NotModeledError, AttributeError):
    """A name a modeled namespace (``torch.npu``, ``torchair``, ``torchair.ge``, ``npugraph_ex``) has on a
    real NPU but the model does not provide. An AttributeError too, so ``hasattr(torch.npu, name)`` is False
    and ``getattr(torch.npu, name, None)`` is None, as for a real module; the message names what is modeled."""


class ModeledDeadlockError(NpufuseError):
    """The modeled device would wait forever (an event waited on but never recorded, or a cycle of
    waits); reported with the streams, tasks and events involved instead of hanging."""


class BaselineError(FileFault):
    """A baseline or run-report file is unreadable, corrupt, or not one pytest-npufuse wrote."""


class ArgumentError(FileFault):
    """A library call or API got an argument of the wrong kind or out of range (``HostConfig(threads=0)``,
    ``check(Model, x)`` with the class instead of an instance). ``argument`` names it where one does
    (``"ranks"``, ``"routing"``, ``"loss"``, ``"optimizer"``, ``"model"``); with a user's function at fault (a
    hook, a loss), ``file`` and ``entry`` (``"line N"``) are where it is defined."""

    def __init__(
        self, *args: object, argument: str | None = None, file: str | None = None, entry: str | None = None,
        bound: float | None = None,
    ) -> None:
        super().__init__(*args, file=file, entry=entry, bound=bound)
        self.argument = argument


class InputFileError(FileFault):
    """A file pytest-npufuse was asked to read cannot be read safely: it is missing, not a regular file (a
    FIFO, a device, a directory, a symlink loop), too large, not UTF-8, nested too deeply, holds a number
    too long or a key twice, or is not valid JSON or TOML. Nothing was read past the problem and nothing
    was written. The readers of :mod:`pytest_npufuse.files` raise it, or the error class of the file's
    role (:class:`BaselineError`, :class:`ProfileError`) when the caller names one."""


class OutputFileError(FileFault):
    """A file pytest-npufuse was asked to write cannot be written safely (read-only, a directory, a special
    file it was not asked to write through to, the same path as another output, a lock another process
    holds too long); nothing was written."""



class ConfigError(NpufuseError, ValueError):
    """A TorchAir ``CompilerConfig`` option set to a value TorchAir rejects (TorchAir raises ValueError)."""


class ConfigPathError(ConfigError, FileNotFoundError):
    """A ``CompilerConfig`` path option naming a file or directory that does not exist (TorchAir raises
    FileNotFoundError; a ConfigError too, so ``except ValueError`` around option setting still catches it)."""


class UnknownOptionError(NpufuseError, AttributeError, ValueError):
    """A ``CompilerConfig`` attribute that does not exist. TorchAir raises ValueError when one is
    assigned; reading one is an AttributeError in Python. Both are caught by either ``except``."""


class KernelError(NpufuseError):
    """An op of the model failed on the values that reached it while its outputs were computed (an index
    out of range, a NaN turned into an index): the model's own error, named at the user's source line."""


class OpArgumentError(NpufuseError, ValueError, RuntimeError):
    """An argument of a torch_npu op or of a TorchAir / ``torch.npu`` API call has a value the real library
    rejects, or one the model does not implement; the message names the argument. A ValueError too, as
    TorchAir raises one, and a RuntimeError, as a torch_npu op's argument check (``TORCH_CHECK``) raises one,
    so scripts and tests that catch either keep working."""


class OpAssertionError(NpufuseError, AssertionError):
    """An argument of a TorchAir API that TorchAir checks with an assertion (``set_dim_gears``) has a value
    it rejects; the message is TorchAir's. An AssertionError too, as TorchAir raises one, so scripts that
    catch it keep working."""


class OpTypeError(NpufuseError, TypeError):
    """An argument of a torch_npu op or of a TorchAir / ``torch.npu`` API call has the wrong type (a list
    where a tensor goes, an int for a bool). A TypeError too, as the real libraries raise one."""


class MarkerError(NpufuseError):
    """A marker was given an argument it does not take, or a value of the wrong kind."""


class MissingOpError(NpufuseError, AttributeError):
    """A torch_npu op the model calls is not among the provided CPU kernels.

    An AttributeError too, so ``hasattr(torch_npu, name)`` and ``getattr(..., default)`` keep working.
    """


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

    def __init__(self, gaps: Sequence[Gap], stopped: str = "") -> None:
        self.gaps = tuple(gaps)
        self.stopped = stopped
        lines = [f"the model needs {len(self.gaps)} thing(s) pytest-npufuse does not provide:"]
        lines += [f"  {index}. {gap.describe()}" for index, gap in enumerate(self.gaps, 1)]
        if stopped:
            lines.append(f"The model could not run on past {stopped}; more gaps may follow it.")
        lines.append(f"See {GAPS_DOCS}.")
        super().__init__("\n".join(lines))


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
