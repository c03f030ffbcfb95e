"""SuperKernel options strings: ``"opt1=v1:opt2=v2"``, list values ``a,b``.

TorchAir passes the string to CANN unchanged; CANN's SuperKernel option parser (the GE path, and a
smaller aclgraph path used by npugraph_ex) validates it when the graph is compiled. We apply the same
rules eagerly, so a typo fails the test that made it, naming the scope, the option and the allowed
values (docs/sources.md#torchair-2026-1, from CANN's public option parser):

- entries are split on ``:``; an entry without ``=`` is skipped with a warning;
- an unknown key, a key given twice, or an empty key or value is an error;
- each key's value follows its own rule (table :data:`OPTIONS`);
- on the aclgraph path ``_`` in keys reads as ``-``, only early-start (0/1), debug-sync-all and the three
  dcci keys apply, and every other key is dropped with a note (an INFO line in CANN's log).

Which options change modeled time (Early-Start, preload-code) is the cost model's business; here they
are parsed, validated and carried to the plan's segments.
"""

from __future__ import annotations

import difflib
import enum
import warnings
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from ..errors import OptionsError, OptionsWarning


class ParserPath(enum.Enum):
    """Which of CANN's two option parsers reads the string: GE (max-autotune) or aclgraph (npugraph_ex)."""

    GE = "ge"
    ACLGRAPH = "aclgraph"


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"use one of {', '.join(allowed)}"

    return check


def _count(low: int, high: int | None) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value.isdigit() and int(value) >= low and (high is None or int(value) <= high):
            return None
        return f"must be an integer in [{low}, {high}]" if high is not None else "must be a non-negative core count"

    return check


def _alignment(value: str) -> str | None:
    """0 (no alignment) or a power of two of at least 2, as CANN's code-text alignment parser accepts."""
    number = int(value) if value.isdigit() else -1
    if number == 0 or (number >= 2 and number & (number - 1) == 0):
        return None
    return "must be 0 or a power of two such as 2, 4, ..., 512"


def _op_types(value: str) -> str | None:
    return None if all(item.strip() for item in value.split(",")) else (
        "must be a comma list of op types, e.g. GroupedMatmul,MoeGatingTopK"
    )


def _flags(value: str) -> str | None:
    return None if all(item.strip() for item in value.split(",")) else "must be a comma list of compiler flags, e.g. -g"


@dataclass(frozen=True)
class OptionRule:
    """One option CANN accepts: its value rule, its default, and whether the aclgraph path takes it."""

    check: Callable[[str], str | None]
    default: str
    aclgraph: bool = False
    meaning: str = ""


# The 16 keys CANN's GE parser registers (docs/sources.md#torchair-2026-1; defaults from the same table,
# strict-scope-check values from TorchAir's option table, docs/sources.md#torchair-2-4).
OPTIONS: Mapping[str, OptionRule] = MappingProxyType(
    {
        "stream-fusion": OptionRule(_one_of("0", "1"), "0", meaning="sub-kernels of one or more streams run in parallel (0: at most two streams, in issue order)"),
        "feed-sync-all": OptionRule(_one_of("0", "1"), "0", meaning="SyncAll on the SuperKernel's extra cores"),
        "strict-scope-check": OptionRule(_one_of("bypass", "abort"), "", meaning="what a split scope does"),
        "dcci-before-kernel-start": OptionRule(_op_types, "", aclgraph=True, meaning="flush the data cache before these ops"),
        "dcci-after-kernel-end": OptionRule(_op_types, "", aclgraph=True, meaning="flush the data cache after these ops"),
        "dcci-disable-on-kernel": OptionRule(_op_types, "", aclgraph=True, meaning="no cache flush around these ops"),
        "debug-aic-num": OptionRule(_count(0, None), "", meaning="force the Cube core count"),
        "debug-aiv-num": OptionRule(_count(0, None), "", meaning="force the Vector core count"),
        "early-start": OptionRule(_one_of("0", "1", "2"), "1", aclgraph=True, meaning="overlap a sub-kernel's tail with the next head"),
        "preload-code": OptionRule(_one_of("per-func", "max", "none"), "per-func", meaning="instruction-cache preload"),
        "split-mode": OptionRule(_count(1, 64), "4", meaning="copies of each sub-kernel binary"),
        "func-align": OptionRule(_alignment, "512", meaning="function alignment in bytes"),
        "debug-dcci-all": OptionRule(_one_of("0", "1"), "0", meaning="flush the cache after every op (debug)"),
        "debug-sync-all": OptionRule(_one_of("0", "1"), "0", aclgraph=True, meaning="full sync between ops (debug)"),
        "profiling": OptionRule(_one_of("0", "1"), "0", meaning="per-sub-kernel timing"),
        "compile-options": OptionRule(_flags, "", meaning="extra compiler flags"),
    }
)
# The aclgraph parser reads early-start as a plain 0/1 switch.
_ACLGRAPH_VALUES: Mapping[str, Callable[[str], str | None]] = MappingProxyType({"early-start": _one_of("0", "1")})


@dataclass(frozen=True)
class SuperKernelOptions:
    """Parsed options of one scope; ``values`` holds only what the user set (and the parser kept),
    ``notes`` what the parser skipped or dropped, worded for the log."""

    scope: str
    text: str
    values: Mapping[str, str]
    path: ParserPath = ParserPath.GE
    notes: tuple[str, ...] = ()

    def get(self, option: str) -> str:
        return self.values.get(option, OPTIONS[option].default)


def _fail(scope: str, problem: str, option: str | None = None) -> OptionsError:
    """CANN's refusal of a scope's options string; ``option`` names the option at fault, where one is."""
    return OptionsError(
        f"super_kernel scope '{scope}': [Super Kernel] Invalid compile option: {problem}", op="super_kernel",
        argument=option,
    )


def _unknown(scope: str, option: str) -> OptionsError:
    near = difflib.get_close_matches(option, list(OPTIONS), n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    return _fail(
        scope,
        f"{option} option is not supported (unknown option '{option}').{hint} Known options: {', '.join(OPTIONS)}.",
        option,
    )


def _check_value(scope: str, option: str, value: str, path: ParserPath) -> None:
    check = _ACLGRAPH_VALUES.get(option, OPTIONS[option].check) if path is ParserPath.ACLGRAPH else OPTIONS[option].check
    problem = check(value)
    if problem is not None:
        raise _fail(scope, f"{option}={value!r} is not allowed; {option} {problem}.", option)


def parse_options(scope: str, text: str, path: ParserPath = ParserPath.GE) -> SuperKernelOptions:
    """Parse and validate ``text`` as CANN's parser for ``path`` does.

    An entry without ``=`` warns (:class:`OptionsWarning`) and is skipped; on the aclgraph path a key
    outside its subset is dropped with a note. Everything else that CANN rejects raises
    :class:`~pytest_npufuse.errors.OptionsError`; an unknown key gets the nearest known name.
    """
    values: dict[str, str] = {}
    notes: list[str] = []
    body = text.strip().strip('"')
    items = [part.strip() for part in body.split(":")] if body.strip() else []
    if "" in items:  # an entry without '=' to CANN, which skips it; said once, not once per colon
        empty = items.count("")
        note = (
            f"super_kernel scope '{scope}': {empty} empty option entr{'y' if empty == 1 else 'ies'} "
            f"(a doubled, leading or trailing ':') in {text!r}; skipped."
        )
        warnings.warn(note, OptionsWarning, stacklevel=3)
        notes.append(note)
    for item in filter(None, items):
        if "=" not in item:
            note = f"super_kernel scope '{scope}': Invalid compile option: {item} do not match option={{value}}; skipped."
            warnings.warn(note, OptionsWarning, stacklevel=3)
            notes.append(note)
            continue
        option, value = (part.strip() for part in item.split("=", 1))
        if path is ParserPath.ACLGRAPH:
            option = option.replace("_", "-")
            if option not in OPTIONS or not OPTIONS[option].aclgraph:
                notes.append(f"super_kernel scope '{scope}': Unsupported compile option for aclgraph backend: {option}; dropped.")
                continue
        if not option or not value:
            raise _fail(
                scope, f"The key-value pair is missing for the option {item!r} in {text!r}; write 'name=value'.",
                option or None,
            )
        if option in values:
            raise _fail(scope, f"{option} option has been set (given twice in {text!r}).", option)
        if option not in OPTIONS:
            raise _unknown(scope, option)
        _check_value(scope, option, value, path)
        values[option] = value
    return SuperKernelOptions(scope, text, MappingProxyType(values), path, tuple(notes))
