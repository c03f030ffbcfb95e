"""The bad-file table: every reader and writer of files, given what users and CI systems give them.

Readers (baselines, ``compare`` inputs, profiles, ``--npufuse-profile`` files, ``pyproject.toml``, the
JSON and TOML readers themselves) meet special files (FIFO, ``/dev/zero``, a directory, a symlink loop, a
socket, a path under a file) and hostile content (huge numbers, deep nesting, bad bytes, duplicate keys,
oversized files); writers meet special files where a regular file was expected. Each row must end in a
pytest-npufuse error that names the file and the problem, within seconds (an alarm fails a row that
blocks), and must leave the file as it was. ``SAFE_ROWS`` are the inputs that must work: named streams,
byte-order marks, brackets inside strings, collision-prone test ids, runs that produce nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import stat
import threading
from collections import namedtuple
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from special import close_sockets, dev_zero, directory, fifo, loop, under_a_file, unix_socket

from pytest_npufuse import compare
from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.errors import NpufuseError
from pytest_npufuse.files import (
    append_text,
    check_outputs,
    ensure_directory,
    locked,
    read_json,
    read_toml,
    write_text,
    write_text_atomic,
)
from pytest_npufuse.files.lock import lock_path
from pytest_npufuse.gate import baseline
from pytest_npufuse.report.trace import case_directory_name, write_case_traces
from pytest_npufuse.target.profile import load_profile
from pytest_npufuse.target.userconfig import UserConfig, load_user_config

Action = Callable[[Path], Any]
ALARM_S = 20


SPECIAL: dict[str, tuple[Callable[[Path], Any], str]] = {
    "FIFO": (fifo, r"is a FIFO \(named pipe\), not a regular file.*could wait forever"),
    "/dev/zero": (dev_zero, r"is a character device, not a regular file"),
    "directory": (directory, r"is a directory; give the path of a"),
    "symlink loop": (loop, r"is a symlink loop .*fix or remove the link"),
    "socket": (unix_socket, r"is a socket, not a regular file"),
}


def _fingerprint(path: Path) -> tuple[int, int] | None:
    """The file type and inode at ``path`` (no symlink followed): a row must leave them unchanged."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return stat.S_IFMT(info.st_mode), info.st_ino


# ----------------------------------------------------------------------------- readers
def compare_input(path: Path) -> Any:
    return cli(["compare", str(path), str(path)])


JSON_READERS: dict[str, Callable[[Path], Any]] = {
    "baseline": baseline.load_baseline,
    "compare input": compare_input,
    "JSON reader": read_json,
}
TOML_READERS: dict[str, Callable[[Path], Any]] = {
    "--npu-target file": lambda path: load_profile(str(path)),
    "--npufuse-profile": lambda path: UserConfig().with_profile_file(path),
    "pyproject.toml": load_user_config,
    "TOML reader": read_toml,
}


def special_reader(reader: Callable[[Path], Any], name: str, make: Callable[[Path], Any]) -> Action:
    def run(tmp: Path) -> Any:
        path = tmp / name
        make(path)
        before = _fingerprint(path)
        try:
            return reader(path)
        finally:
            assert _fingerprint(path) == before, "the special file was changed"

    return run


def under_file_reader(reader: Callable[[Path], Any], name: str) -> Action:
    return lambda tmp: reader(under_a_file(tmp / name))


def content_reader(reader: Callable[[Path], Any], name: str, content: bytes | Callable[[Path], None]) -> Action:
    def run(tmp: Path) -> Any:
        path = tmp / name
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
        size = path.stat().st_size
        try:
            return reader(path)
        finally:
            assert path.stat().st_size == size, "the file was changed"

    return run


def sparse(size: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with path.open("wb") as handle:
            handle.truncate(size)

    return make


def _doc(entries: str = "{}", extra: str = "") -> bytes:
    return (
        '{"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 1, "model_version": null, "model": null, '
        f'{extra}"entries": {entries}}}'
    ).encode()


ENTRY = '{"mode": "m", "baseline_us": 2.0, "variant_us": 1.0, "speedup": 2.0, "segments": 1, "streams": 1, "model_version": "v"}'
DEEP = 100_000
JSON_CONTENT: dict[str, tuple[bytes | Callable[[Path], None], str]] = {
    "a 5,000-digit integer": (_doc(extra='"n": 1' + "0" * 4999 + ", "), r"a number 5000 characters long"),
    "a 5,000-digit float": (_doc(extra='"n": 1.' + "0" * 4998 + ", "), r"a number 5000 characters long"),
    "1e99999 (overflows to infinity)": (
        _doc(extra='"n": 1e99999, '),
        r"the number 1e99999 is out of the range of a double",
    ),
    "100,000 nested lists": (
        b"[" * DEEP + b"]" * DEEP,
        r"nests arrays and objects deeper than 64 levels \(at line 1 column 65 \(byte 64\)\)",
    ),
    "100,000 nested objects": (b'{"a":' * DEEP + b"1" + b"}" * DEEP, r"nests arrays and objects deeper than 64 levels"),
    "NaN": (_doc(extra='"n": NaN, '), r"NaN is not a JSON number"),
    "Infinity": (_doc(extra='"n": Infinity, '), r"Infinity is not a JSON number"),
    "-Infinity": (_doc(extra='"n": -Infinity, '), r"-Infinity is not a JSON number"),
    '"entries" twice (a bad merge)': (
        _doc(extra='"entries": {}, '),
        r"key 'entries' appears twice in one object .*keep one copy",
    ),
    "a case twice": (
        _doc('{"t::a": {"a3": ' + ENTRY + '}, "t::a": {"a3": ' + ENTRY + "}}"),
        r"key 't::a' appears twice",
    ),
    "a target twice in one case": (
        _doc('{"t::a": {"a3": ' + ENTRY + ', "a3": ' + ENTRY + "}}"),
        r"key 'a3' appears twice",
    ),
    "a byte that is not UTF-8": (b'{"tool": "pytest-npufuse\xff"}', r"not UTF-8 text: byte 24 \(line 1\) is 0xff"),
    "UTF-16 with a byte-order mark": ('{"tool": 1}'.encode("utf-16"), r"not UTF-8 text: byte 0 \(line 1\) is 0xff"),
    "a bad byte on line 3": (b'{\n"a": 1,\n"b": "\xc3\x28"}', r"not UTF-8 text: byte 16 \(line 3\) is 0xc3"),
    "truncated": (_doc()[:-20], r"corrupt JSON \(.* at line 1 column \d+ \(byte \d+\)\)"),
    "empty": (b"", r"corrupt JSON \(Expecting value at line 1 column 1 \(byte 0\)\)"),
    "NUL bytes": (b"\x00" * 16, r"corrupt JSON \(Expecting value at line 1 column 1 \(byte 0\)\)"),
    "a multi-byte character before the error": ('{"é": 1,,}'.encode(), r"corrupt JSON \(.*column 9 \(byte 9\)\)"),
    "larger than 64 MiB": (sparse(64 * 1024 * 1024 + 1), r"is larger than 64 MiB"),
}

DEEP_TOML = 3000
TOML_CONTENT: dict[str, tuple[bytes | Callable[[Path], None], str]] = {
    "3,000 nested arrays": (
        b"a = " + b"[" * DEEP_TOML + b"]" * DEEP_TOML,
        r"nests arrays and tables deeper than 64 levels \(line 1\)",
    ),
    "3,000 nested inline tables": (
        b"a = " + b"{b = " * DEEP_TOML + b"1" + b"}" * DEEP_TOML,
        r"nests arrays and tables deeper than 64 levels",
    ),
    "3,000 dotted keys": (b"a" + b".a" * DEEP_TOML + b" = 1", r"nests tables deeper than 64 levels"),
    "3,000 dotted table headers": (b"[a" + b".a" * DEEP_TOML + b"]\nx = 1", r"nests tables deeper than 64 levels"),
    "a 5,000-digit integer": (
        b"a = 1" + b"0" * 4999,
        r"an integer thousands of digits long, far outside TOML's signed 64-bit range",
    ),
    "2**63": (f"[t]\na = {2**63}".encode(), r"key t.a is an integer outside TOML's signed 64-bit range"),
    "-2**63 - 1": (f"a = [1, {-(2**63) - 1}]".encode(), r"key a\[1\] is an integer outside"),
    "a byte that is not UTF-8": (b'a = "caf\xe9"', r"not UTF-8 text: byte 8 \(line 1\) is 0xe9"),
    "a key twice": (b"a = 1\na = 2\n", r"not valid TOML: Cannot overwrite a value.*line"),
    "a table twice": (b"[t]\na = 1\n[t]\nb = 2\n", r"not valid TOML: .*line 3"),
    "a NUL byte": (b"a = 1\x00\n", r"not valid TOML"),
    "larger than 16 MiB": (sparse(16 * 1024 * 1024 + 1), r"is larger than 16 MiB"),
}


def _reader_rows() -> list[tuple[str, str, Action, str]]:
    rows = []
    for readers, name in ((JSON_READERS, "x.json"), (TOML_READERS, "x.toml")):
        for reader_name, reader in readers.items():
            for kind, (make, pattern) in SPECIAL.items():
                rows.append(("special file", f"{reader_name}: {kind}", special_reader(reader, name, make), pattern))
            rows.append(
                (
                    "special file",
                    f"{reader_name}: a path under a file",
                    under_file_reader(reader, name),
                    r"under a file",
                )
            )
    for readers, contents, name in ((JSON_READERS, JSON_CONTENT, "x.json"), (TOML_READERS, TOML_CONTENT, "x.toml")):
        for reader_name, reader in readers.items():
            for given, (content, pattern) in contents.items():
                rows.append(
                    ("hostile content", f"{reader_name}: {given}", content_reader(reader, name, content), pattern)
                )
    return rows


# ----------------------------------------------------------------------------- writers
def kept_special(make: Callable[[Path], Any], name: str, write: Callable[[Path], Any]) -> Action:
    """Put ``make`` at ``name``, then ``write`` to it: the special file must still be there, unchanged."""

    def run(tmp: Path) -> Any:
        path = tmp / name
        make(path)
        before = _fingerprint(path)
        try:
            return write(path)
        finally:
            assert _fingerprint(path) == before, "the special file was replaced"

    return run


def trace_over_fifo(tmp: Path) -> Any:
    report = compare(lambda a: a * 2, torch.ones(2, 2))
    target = tmp / case_directory_name("t::x") / "baseline" / "trace_view.json"
    target.parent.mkdir(parents=True)
    os.mkfifo(target)
    try:
        return write_case_traces(report, tmp, "t::x")
    finally:
        assert stat.S_ISFIFO(os.lstat(target).st_mode)


def lock_is_a_fifo(tmp: Path) -> Any:
    os.mkfifo(lock_path(tmp / "b.json"))
    with locked(tmp / "b.json", "baseline"):
        pass


def lock_held_elsewhere(tmp: Path) -> Any:
    """Another process holds the lock past the timeout: a clear error naming it, not a hang."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from pytest_npufuse.files import locked\n"
            "with locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(30)",
            str(tmp / "b.json"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with locked(tmp / "b.json", "baseline", timeout_s=0.3):
            pass
    finally:
        holder.kill()
        holder.wait()


WRITER_ROWS: list[tuple[str, str, Action, str]] = [
    (
        "special output",
        "trace file is a FIFO",
        kept_special(fifo, "t.json", lambda p: write_text(p, "x", "trace file")),
        r"trace file .*t.json: is a FIFO \(named pipe\), and pytest-npufuse writes this file only as a regular file",
    ),
    (
        "special output",
        "trace file is /dev/zero",
        kept_special(dev_zero, "t.json", lambda p: write_text(p, "x", "trace file")),
        r"is a character device, and pytest-npufuse writes this file only as a regular file",
    ),
    (
        "special output",
        "named output is a FIFO nobody reads",
        kept_special(fifo, "r.json", lambda p: write_text(p, "x", "run report", named=True)),
        r"run report .*r.json: could not be opened for writing .*no process is reading the FIFO; start the reader first",
    ),
    (
        "special output",
        "named output is a socket",
        kept_special(unix_socket, "r.json", lambda p: write_text(p, "x", "run report", named=True)),
        r"is a socket, which pytest-npufuse never replaces",
    ),
    (
        "special output",
        "atomic write over /dev/zero",
        kept_special(dev_zero, "b.json", lambda p: write_text_atomic(p, "x", "baseline")),
        r"baseline .*b.json: is a character device, which pytest-npufuse never replaces",
    ),
    (
        "special output",
        "atomic write over a FIFO",
        kept_special(fifo, "b.json", lambda p: write_text_atomic(p, "x", "baseline")),
        r"is a FIFO \(named pipe\), which pytest-npufuse never replaces",
    ),
    (
        "special output",
        "write over a symlink loop",
        kept_special(loop, "b.json", lambda p: write_text(p, "x", "baseline")),
        r"baseline .*b.json: is a symlink loop, so it was not replaced; fix or remove the link",
    ),
    (
        "special output",
        "named write over a symlink loop",
        kept_special(loop, "r.json", lambda p: write_text(p, "x", "run report", named=True)),
        r"is a symlink loop, so it was not replaced",
    ),
    (
        "special output",
        "write over a directory",
        kept_special(directory, "b.json", lambda p: write_text(p, "x", "baseline")),
        r"is a directory; give the path of a file",
    ),
    (
        "special output",
        "plog is a FIFO",
        kept_special(fifo, "plog.log", lambda p: append_text(p, "x", "plog")),
        r"plog .*plog.log: is a FIFO \(named pipe\), not a regular file, so nothing was written",
    ),
    (
        "special output",
        "plog is /dev/zero",
        kept_special(dev_zero, "plog.log", lambda p: append_text(p, "x", "plog")),
        r"is a character device, not a regular file",
    ),
    (
        "special output",
        "plog is a directory",
        kept_special(directory, "plog.log", lambda p: append_text(p, "x", "plog")),
        r"is a directory, not a regular file",
    ),
    (
        "special output",
        "dump directory is a FIFO",
        kept_special(fifo, "dump", lambda p: ensure_directory(p, "dump_config.dump_path")),
        r"dump_config.dump_path .*dump: is a FIFO \(named pipe\), not a directory",
    ),
    (
        "special output",
        "dump directory under a file",
        lambda t: ensure_directory(under_a_file(t / "dump"), "dump_config.dump_path"),
        r"dump_config.dump_path .*dump: is under a file, not a directory",
    ),
    ("special output", "a trace file is a FIFO", trace_over_fifo, r"trace file .*trace_view.json: is a FIFO"),
    (
        "special output",
        "--npufuse-baseline is '-'",
        lambda t: check_outputs({"--npufuse-baseline": Path("-")}),
        r"--npufuse-baseline -: names a stream, but the --npufuse-baseline must be a file",
    ),
    (
        "special output",
        "--npufuse-baseline is a FIFO (updating)",
        kept_special(fifo, "b.json", lambda p: check_outputs({"--npufuse-baseline": p})),
        r"is a FIFO \(named pipe\), which pytest-npufuse never replaces",
    ),
    (
        "special output",
        "--npufuse-json is a socket",
        kept_special(
            unix_socket, "r.json", lambda p: check_outputs({"--npufuse-json": p}, streams=("--npufuse-json",))
        ),
        r"is a socket, which pytest-npufuse never replaces",
    ),
    (
        "lock",
        "the lock file is a FIFO",
        lock_is_a_fifo,
        r"its lock file .*\.b\.json\.npufuse-lock is a FIFO \(named pipe\); remove it",
    ),
    (
        "lock",
        "another process holds the lock too long",
        lock_held_elsewhere,
        r"baseline .*b.json: another process \(pid \d+\) has held its lock .* for 0.3 s; nothing was written",
    ),
    (
        "lock",
        "a lock for a path under a file",
        lambda t: locked(under_a_file(t / "b.json")).__enter__(),
        r"output .*plain/b.json: .*plain is a file \(or lies under one\); give a path in a directory",
    ),
]


# ----------------------------------------------------------------------------- models with odd outputs
class Generator(torch.nn.Module):
    def forward(self, x):
        return (t for t in (x * 2, x + 1))


class Iterating(torch.nn.Module):
    def forward(self, x):
        return iter([x * 2, x + 1])


class Opaque:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class ReturnsOpaque(torch.nn.Module):
    def forward(self, x):
        return x * 2, Opaque(x + 1)


class MapIterator(torch.nn.Module):
    def forward(self, x):
        return {"a": map(torch.neg, [x])}


X = torch.ones(4, 4)
OUTPUT_ROWS: list[tuple[str, str, Action, str]] = [
    (
        "odd output",
        "a generator of tensors",
        lambda t: compare(Generator(), X),
        r"the model returns an iterator \(\w+\) at output: a generator or iterator cannot be compared without consuming it.*return a tuple or list",
    ),
    (
        "odd output",
        "an iterator of tensors",
        lambda t: compare(Iterating(), X),
        r"returns an iterator \(\w+\) at output",
    ),
    (
        "odd output",
        "an object pytree cannot open",
        lambda t: compare(ReturnsOpaque(), X),
        r"returns a .*Opaque at output\[1\], which pytest-npufuse cannot look inside.*register_pytree_node",
    ),
    (
        "odd output",
        "a reference returning a generator",
        lambda t: compare(lambda x: (x * 2,), X, reference=lambda x: (v for v in (x * 2,))),
        r"the reference returns an iterator",
    ),
]

ROWS = _reader_rows() + WRITER_ROWS + OUTPUT_ROWS


class _Blocked(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Blocked(f"blocked for {ALARM_S} s")


def _message(action: Action, tmp: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The error ``action`` gives (an NpufuseError, or what the command line printed when it exited
    non-zero); a raw exception, no error at all, or blocking fails the row."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        code = action(tmp)
    except NpufuseError as exc:
        return str(exc)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        close_sockets()
    assert isinstance(code, int) and not isinstance(code, bool) and code != 0, f"no error; returned {code!r}"
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "given", "action", "pattern"), ROWS, ids=[f"{kind}: {given}" for kind, given, _, _ in ROWS]
)
def test_bad_file_gives_a_clear_error_and_is_left_as_it_was(kind, given, action, pattern, tmp_path, capsys):
    message = _message(action, tmp_path, capsys)
    assert re.search(pattern, message, re.S), message
    assert "Traceback" not in message


# ----------------------------------------------------------------------------- inputs that must work
def reader_thread(path: Path, got: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def fifo_with_reader(tmp: Path) -> None:
    path = tmp / "r.json"
    os.mkfifo(path)
    got: list[bytes] = []
    thread = reader_thread(path, got)
    for _ in range(200):  # the reader must have the FIFO open before a non-blocking open for writing
        if _opened_by_reader(path):
            break
        threading.Event().wait(0.01)
    write_text(path, '{"a": 1}', "run report", named=True)
    thread.join(10)
    assert got == [b'{"a": 1}'] and stat.S_ISFIFO(os.lstat(path).st_mode)


def _opened_by_reader(path: Path) -> bool:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def named_dev_null(tmp: Path) -> None:
    (tmp / "r.json").symlink_to("/dev/null")
    write_text(tmp / "r.json", "x" * 100_000, "run report", named=True)
    assert os.readlink(tmp / "r.json") == "/dev/null" and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def stdout_dash(tmp: Path) -> None:
    read, write = os.pipe()
    saved = os.dup(1)
    os.dup2(write, 1)
    try:
        write_text(Path("-"), "to stdout\n", "run report", named=True)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(write)
    with os.fdopen(read, "rb") as handle:
        assert handle.read() == b"to stdout\n"


def dangling_symlink_baseline(tmp: Path) -> None:
    (tmp / "b.json").symlink_to(tmp / "real.json")
    assert baseline.load_baseline(tmp / "b.json").entries == {}
    baseline.write_baseline(tmp / "b.json", baseline.Results(None, {}))
    assert (tmp / "b.json").is_symlink() and json.loads((tmp / "real.json").read_text())["kind"] == "baseline"


def reads(path_name: str, content: bytes, reader: Callable[[Path], Any], check: Callable[[Any], bool]) -> Action:
    def run(tmp: Path) -> None:
        (tmp / path_name).write_bytes(content)
        assert check(reader(tmp / path_name))

    return run


def distinct_directories(*ids: str) -> Action:
    def run(tmp: Path) -> None:
        names = [case_directory_name(case) for case in ids]
        assert len({name.lower() for name in names}) == len(ids), names

    return run


@dataclasses.dataclass
class Hidden:
    states: torch.Tensor
    extra: tuple


Pair = namedtuple("Pair", "first second")


def outputs_named(model: Callable[..., Any], *names: str) -> Action:
    def run(tmp: Path) -> None:
        report = compare(model, X)
        assert report.outputs == names and report.bit_exact

    return run


SAFE_ROWS: list[tuple[str, Action]] = [
    ("a FIFO a reader has open, named as the run report", fifo_with_reader),
    ("a symlink to /dev/null named as the run report", named_dev_null),
    ("'-' writes to standard output", stdout_dash),
    ("a dangling symlink as the baseline", dangling_symlink_baseline),
    (
        "a JSON baseline with a UTF-8 byte-order mark",
        reads("b.json", b"\xef\xbb\xbf" + _doc(), baseline.load_baseline, lambda r: r.entries == {}),
    ),
    (
        "a TOML file with a UTF-8 byte-order mark",
        reads("p.toml", b"\xef\xbb\xbfa = 1\n", read_toml, lambda d: d == {"a": 1}),
    ),
    (
        "1,000 brackets inside a JSON string",
        reads("x.json", b'{"a": "' + b"[" * 1000 + b'"}', read_json, lambda d: d == {"a": "[" * 1000}),
    ),
    (
        "1,000 brackets in TOML strings and comments",
        reads(
            "x.toml",
            b"a = '" + b"[" * 1000 + b"' # " + b"{" * 1000 + b'\nb = """' + b"[" * 1000 + b'"""\n',
            read_toml,
            lambda d: d["a"] == "[" * 1000,
        ),
    ),
    (
        "64 nested JSON lists (the limit)",
        reads("x.json", b"[" * 64 + b"]" * 64, read_json, lambda d: isinstance(d, list)),
    ),
    (
        "an escaped quote before brackets in JSON",
        reads("x.json", b'{"a\\"": "[[[", "b": [1]}', read_json, lambda d: d == {'a"': "[[[", "b": [1]}),
    ),
    ("ids differing only in punctuation", distinct_directories("a/b", "a b", "a_b", "a:b", "a.b", "a-b")),
    ("ids differing only in case", distinct_directories("t::Test", "t::test", "t::TEST")),
    (
        "ids differing only in unicode",
        distinct_directories("t[café]", "t[cafe\u0301]", "t[cafe]", "t[caf\u0435]", "t[\u00e9]"),
    ),
    ("ids that are hidden or empty names", distinct_directories("", ".", "..", "...", "_")),
    ("ids longer than a file name", distinct_directories("x" * 300, "x" * 301, "x" * 300 + "/")),
    ("ids of parametrized tests", distinct_directories("t::f[1-2]", "t::f[1 2]", "t::f[1_2]", "t::f[12]")),
    (
        "a dataclass output",
        outputs_named(lambda x: Hidden(x * 2, (x + 1, 3)), "output.states", "output.extra[0]", "output.extra[1]"),
    ),
    (
        "a namedtuple of a dict of lists",
        outputs_named(
            lambda x: Pair(x * 2, {"k": [x + 1, (x - 1,)]}),
            "output.first",
            "output.second['k'][0]",
            "output.second['k'][1][0]",
        ),
    ),
    (
        "a dict with plain values",
        outputs_named(
            lambda x: {"a": x * 2, "n": 3, "s": "text", "none": None, "dtype": x.dtype},
            "output['a']",
            "output['n']",
            "output['s']",
            "output['none']",
            "output['dtype']",
        ),
    ),
]


@pytest.mark.parametrize(("given", "action"), SAFE_ROWS, ids=[given for given, _ in SAFE_ROWS])
def test_input_that_must_work_works(given, action, tmp_path):
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        action(tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
