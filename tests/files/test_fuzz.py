"""Property tests of the readers: any bytes give a value or one of our errors, never another exception,
a hang (Hypothesis's deadline) or a write (the directory is the same before and after).

Inputs mix raw bytes, text over each format's punctuation (so brackets, quotes, escapes and numbers come
up often), and mutations of a valid document (a byte flipped, cut, or repeated). The example counts are
modest so the suite stays quick; ``--hypothesis-seed`` reproduces a failure.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_npufuse.calibrate.msprof import read_kernels, read_statistics
from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.errors import NpufuseError
from pytest_npufuse.files import read_json, read_toml
from pytest_npufuse.gate.baseline import load_baseline
from pytest_npufuse.gate.run_document import read_run_tests
from pytest_npufuse.plan.options import OPTIONS, ParserPath, parse_options
from pytest_npufuse.target.profile import builtin_profile_text, load_profile

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

VALID_BASELINE = (
    b'{"entries": {"t::a": {"a3": {"baseline_us": 2.0, "mode": "max-autotune", "model_version": "v", "segments": 1, '
    b'"speedup": 2.0, "streams": 1, "variant_us": null}}}, "kind": "baseline", "model": {"catalog": "c", '
    b'"profiles": {"a3": "p"}, "simulator": "1"}, "model_version": "v", "schema_version": 1, "tool": "pytest-npufuse"}'
)
VALID_RUN = (
    b'{"entries": {}, "gate": null, "kind": "run", '
    b'"model": {"catalog": "c", "profiles": {"a3": "p"}, "simulator": "1"}, "model_version": null, "schema_version": 1, '
    b'"summary": {"passed": 1}, "tests": {"t::a": {"npufuse": [{"key": "t::a", "target": "a3", "mode": "m", '
    b'"baseline_us": 2.0, "variant_us": 1.0, "speedup": 2.0, "segments": 1, "streams": 1, "model_version": "v"}], '
    b'"outcome": "passed"}}, "tool": "pytest-npufuse"}'
)
VALID_PROFILE = builtin_profile_text("a3").encode("utf-8")
MSPROF = Path(__file__).resolve().parents[1] / "calibrate" / "data"
VALID_KERNELS = (MSPROF / "kernel_details.csv").read_bytes()
VALID_STATISTICS = (MSPROF / "op_statistic.csv").read_bytes()
VALID_TOML = VALID_PROFILE[:3000]


def mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with one byte changed, a slice removed, or a slice repeated."""
    spot = st.integers(0, len(seed) - 1)
    return st.one_of(
        st.tuples(spot, st.integers(0, 255)).map(lambda c: seed[: c[0]] + bytes([c[1]]) + seed[c[0] + 1 :]),
        st.tuples(spot, spot).map(lambda c: seed[: min(c)] + seed[max(c) :]),
        st.tuples(spot, spot, st.integers(2, 400)).map(
            lambda c: seed[: min(c[:2])] + seed[min(c[:2]) : max(c[:2])] * c[2] + seed[max(c[:2]) :]
        ),
    )


def punctuated(alphabet: str) -> st.SearchStrategy[bytes]:
    return st.text(alphabet=alphabet, max_size=400).map(lambda text: text.encode("utf-8"))


JSON_BYTES = st.one_of(
    st.binary(max_size=400),
    punctuated('[]{}",:0123456789.eE+-tfnrulasNIiy \\\n\u00e9'),
    mutations(VALID_BASELINE),
    mutations(VALID_RUN),
)
TOML_BYTES = st.one_of(
    st.binary(max_size=400),
    punctuated("[]{}=\"'#.,\n abtx0123456789+-_:TZ\\\u00e9"),
    mutations(VALID_TOML),
)


CSV_TEXT = st.text(alphabet=',;\t"\n\r Step IdNameTypeDuration(us)InputShapes0123456789.eE+-N/A[]\u00e9\x00',
                   max_size=400)
CSV_BYTES = st.one_of(
    st.binary(max_size=400),
    CSV_TEXT.map(lambda text: text.encode("utf-8")),
    st.tuples(CSV_TEXT, st.sampled_from(["utf-16", "utf-16-le", "utf-8-sig"])).map(
        lambda pair: pair[0].encode(pair[1], "surrogatepass")),
    mutations(VALID_KERNELS),
    mutations(VALID_STATISTICS),
)


def _listing(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def value_or_our_error(reader: Callable[[Path], Any], data: bytes, name: str) -> None:
    """Run ``reader`` on a file holding ``data``: it returns or raises an NpufuseError, and writes nothing."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        before = _listing(Path(folder))
        try:
            reader(path)
        except NpufuseError:
            pass
        assert _listing(Path(folder)) == before


def compare_command(path: Path) -> None:
    assert cli(["compare", str(path), str(path)]) in (0, 1, 2)


JSON_READERS = {
    "JSON reader": read_json, "baseline": load_baseline, "run report": read_run_tests, "compare": compare_command,
}


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
@FUZZ
@given(data=JSON_BYTES)
def test_a_json_reader_gives_a_value_or_our_error(reader, data):
    value_or_our_error(JSON_READERS[reader], data, "x.json")


def merge_command(path: Path) -> None:
    """The shard merged with a valid one, into a file beside them (the listing then has one file more
    when the merge succeeds, so this reader checks what it wrote itself)."""
    with tempfile.TemporaryDirectory() as folder:
        other, out = Path(folder) / "other.json", Path(folder) / "out.json"
        other.write_bytes(VALID_RUN)
        assert cli(["merge", str(out), str(path), str(other)]) in (0, 2)


CSV_READERS = {"kernel_details.csv": read_kernels, "op_statistic.csv": read_statistics}


@pytest.mark.parametrize("reader", sorted(CSV_READERS))
@FUZZ
@given(data=CSV_BYTES)
def test_a_csv_reader_gives_rows_or_our_error(reader, data):
    value_or_our_error(CSV_READERS[reader], data, reader)


@FUZZ
@given(JSON_BYTES)
def test_merge_gives_a_document_or_our_error(data):
    value_or_our_error(merge_command, data, "shard.json")


@FUZZ
@given(TOML_BYTES)
def test_the_toml_reader_gives_a_value_or_our_error(data):
    value_or_our_error(read_toml, data, "p.toml")


@FUZZ
@given(mutations(VALID_PROFILE))
def test_the_profile_loader_gives_a_profile_or_our_error(data):
    value_or_our_error(lambda path: load_profile(str(path)), data, "p.toml")


OPTION_PIECES = [
    *OPTIONS,
    *(name.replace("-", "_") for name in OPTIONS),
    "=",
    ":",
    ",",
    '"',
    " ",
    "0",
    "1",
    "2",
    "abort",
    "bypass",
    "max",
    "-g",
    "GroupedMatmul",
    "",
    "x",
    "==",
]


@FUZZ
@given(
    st.one_of(st.text(max_size=200), st.lists(st.sampled_from(OPTION_PIECES), max_size=30).map("".join)),
    st.sampled_from(list(ParserPath)),
)
def test_the_options_parser_gives_options_or_our_error(text, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            options = parse_options("sp1", text, path)
        except NpufuseError:
            return
    assert set(options.values) <= set(OPTIONS)
