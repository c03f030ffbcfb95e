"""Which profile values a row's evaluation reads, so a fit re-simulates a row only when one of them moved.

A fit tries hundreds of sets of constants and most rows read only some of them (a kernel row no host or
MC2 cost, a collective no Cube efficiency): a row's outcome is a deterministic function of the profile
values its evaluation read, so it is remembered under those values and reused by every later trial that
agrees on all of them. The reads are recorded while the row is evaluated on a traced copy of its profile:
a scalar field by name, a table (``overhead_us``, ``host_us``, ...) by key, a whole table when it is
iterated. What is remembered is exact, never an approximation: a trial that differs in any value the row
read simulates the row again.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Iterator, Mapping, TypeVar

from pytest_npufuse.target.profile import HardwareProfile

# A read: (target name, field, key in the field's table or None for a scalar field or a whole table).
Read = tuple[str, str, Any]
_WHOLE = None
_ABSENT = object()
_TABLES = frozenset(f.name for f in fields(HardwareProfile) if str(f.type).startswith("Mapping"))
_SCALARS = frozenset(f.name for f in fields(HardwareProfile)) - _TABLES
_reads: set[Read] | None = None
T = TypeVar("T")


class _RecordedTable(Mapping):
    """A profile table that notes each key read (and the whole table when it is iterated)."""

    def __init__(self, target: str, name: str, table: Mapping[str, float]) -> None:
        self._where, self._table = (target, name), table

    def __getitem__(self, key: str) -> float:
        if _reads is not None:
            _reads.add((*self._where, key))
        return self._table[key]

    def __iter__(self) -> Iterator[str]:
        if _reads is not None:
            _reads.add((*self._where, _WHOLE))
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


class _TracedProfile(HardwareProfile):
    """A profile that notes every scalar field read while :func:`recording`."""

    def __getattribute__(self, name: str) -> Any:
        if _reads is not None and name in _SCALARS:
            _reads.add((object.__getattribute__(self, "name"), name, _WHOLE))
        return object.__getattribute__(self, name)


def _raw(profile: HardwareProfile, name: str) -> Any:
    """A field of a profile, traced or not, without recording the read."""
    value = object.__getattribute__(profile, name)
    return value._table if isinstance(value, _RecordedTable) else value


def traced(profile: HardwareProfile) -> HardwareProfile:
    """A copy of ``profile`` whose reads are recorded (outside :func:`recording` it reads as the profile)."""
    values = {f.name: _raw(profile, f.name) for f in fields(HardwareProfile)}
    tables = {name: _RecordedTable(values["name"], name, values[name]) for name in _TABLES}
    return _TracedProfile(**{**values, **tables})


def recording(evaluate: Callable[[], T]) -> tuple[frozenset[Read], T]:
    """``evaluate()`` and the profile values it read (also noted in any recording around this one)."""
    global _reads
    outer, _reads = _reads, set()
    try:
        result = evaluate()
        return frozenset(_reads), result
    finally:
        inner, _reads = _reads, outer
        if outer is not None:
            outer.update(inner)


def read_values(reads: tuple[Read, ...], profile_of: Callable[[str], HardwareProfile]) -> tuple:
    """The values of ``reads`` in the profiles ``profile_of`` gives per target name."""
    found = []
    for target, name, key in reads:
        value = _raw(profile_of(target), name)
        if name in _TABLES:
            value = tuple(sorted(value.items())) if key is _WHOLE else value.get(key, _ABSENT)
        found.append(value)
    return tuple(found)


class Memo:
    """Results remembered under a key and the profile values computing them read: a later call with
    the key whose profiles agree on every one of those values gets the same result without computing."""

    def __init__(self) -> None:
        self._seen: dict[Any, dict[tuple[Read, ...], dict[tuple, Any]]] = {}

    def get(self, key: Any, compute: Callable[[], T], profile_of: Callable[[str], HardwareProfile]) -> T:
        """The result of ``compute()`` (which must read its profiles traced, :func:`traced`), where
        ``profile_of`` gives the untraced profile of a target name."""
        seen = self._seen.setdefault(key, {})
        for reads, known in seen.items():
            result = known.get(read_values(reads, profile_of), _ABSENT)
            if result is not _ABSENT:
                if _reads is not None:
                    _reads.update(reads)
                return result
        read, result = recording(compute)
        reads = tuple(sorted(read, key=repr))
        seen.setdefault(reads, {})[read_values(reads, profile_of)] = result
        return result
