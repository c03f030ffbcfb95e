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
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from pytest_npufuse.errors import ProfileError
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


class Influence:
    """Which fitted constants can change each profile value a row reads: found by moving one constant at a
    time (to its lower and its upper bound) in each target's profile and noting every field and table key
    that changes. A read no constant changes (a core count, a tile shape, a cited rate) is the same in
    every trial; a whole-table read depends on every constant that changes a key of the table."""

    def __init__(self, names: Sequence[Any], bounds: Callable[[Any], tuple[float, ...]],
                 profile_with: Callable[[str, Mapping[Any, float]], HardwareProfile]) -> None:
        self._names, self._bounds, self._profile_with = list(names), bounds, profile_with
        self._by_target: dict[str, dict[tuple[str, Any], frozenset]] = {}

    def covers(self, names: Iterable[Any]) -> bool:
        """Whether every one of ``names`` is a constant this map knows."""
        return set(names) <= set(self._names)

    def extend(self, names: Iterable[Any]) -> None:
        """Know ``names`` too (a caller that moves a constant the fit does not: the map is made anew)."""
        self._names += [name for name in names if name not in self._names]
        self._by_target.clear()

    def of(self, read: Read) -> frozenset:
        """The constants that can change ``read``'s value."""
        target, name, key = read
        table = self._by_target.get(target)
        if table is None:
            table = self._by_target[target] = self._map(target)
        return table.get((name, key), frozenset())

    def _map(self, target: str) -> dict[tuple[str, Any], frozenset]:
        base = self._profile_with(target, {})
        moved: dict[tuple[str, Any], set] = {}
        for name in self._names:
            for value in self._bounds(name):
                try:
                    other = self._profile_with(target, {name: value})
                except ProfileError:  # a value the profile refuses (a share above 1): the other move tells
                    continue
                for place in _differences(base, other):
                    moved.setdefault(place, set()).add(name)
        return {place: frozenset(names) for place, names in moved.items()}


def _differences(base: HardwareProfile, other: HardwareProfile) -> Iterator[tuple[str, Any]]:
    """The (field, key) places where two profiles differ; a table that differs anywhere also differs whole."""
    for name in _SCALARS | _TABLES:
        mine, theirs = _raw(base, name), _raw(other, name)
        if mine == theirs:
            continue
        yield name, _WHOLE
        if name in _TABLES:
            yield from ((name, key) for key in set(mine) | set(theirs) if mine.get(key) != theirs.get(key))


class ValuesMemo:
    """Results remembered under the values of just the fitted constants that can change what computing them
    read (:class:`Influence`): the same exactness as :class:`Memo`, but a lookup reads a handful of
    constants instead of every profile value a step reads, and no profile is built for a hit."""

    def __init__(self, influence: Influence) -> None:
        self._influence = influence
        self._seen: dict[Any, dict[tuple, dict[tuple, Any]]] = {}

    def get(self, key: Any, values: Mapping[Any, float], compute: Callable[[], T]) -> T:
        """The result of ``compute()`` under the constants ``values`` (a constant absent from ``values``
        is at its built-in value)."""
        if not self._influence.covers(values):
            self._influence.extend(values)
            self._seen.clear()
        seen = self._seen.setdefault(key, {})
        for names, known in seen.items():
            result = known.get(tuple(values.get(name, _ABSENT) for name in names), _ABSENT)
            if result is not _ABSENT:
                return result
        read, result = recording(compute)
        names = tuple(sorted(frozenset().union(*(self._influence.of(item) for item in read)), key=repr))
        seen.setdefault(names, {})[tuple(values.get(name, _ABSENT) for name in names)] = result
        return result
