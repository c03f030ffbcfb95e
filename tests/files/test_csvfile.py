"""The CSV reader (msprof's tables): spreadsheet encodings read the same, and what no profiler writes is
refused naming the file, the line or column and the bound, as error fields."""

from __future__ import annotations

import codecs

import pytest

from pytest_npufuse.calibrate.msprof import PROFILE_CSV, read_kernels
from pytest_npufuse.errors import CalibrationError
from pytest_npufuse.files import limits
from pytest_npufuse.files.csvfile import read_table

TEXT = "Name,Type,Duration(us)\nmm,MatMulV2,12.5\nadd,Add,1.5\n"


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text.encode("utf-8"),
        lambda text: codecs.BOM_UTF8 + text.encode("utf-8"),
        lambda text: text.encode("utf-16"),  # with its byte-order mark, as a spreadsheet saves "Unicode text"
        lambda text: codecs.BOM_UTF16_BE + text.encode("utf-16-be"),
        lambda text: text.replace(",", "\t").replace("\n", "\r\n").encode("utf-16"),
    ],
    ids=["utf-8", "utf-8-bom", "utf-16-le", "utf-16-be", "utf-16-tabs-crlf"],
)
def test_every_encoding_a_spreadsheet_saves_reads_the_same_kernels(tmp_path, encode):
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(encode(TEXT))
    kernels = read_kernels(path)
    rows = [(k.line, k.name, k.op_type, k.duration_us) for k in kernels]
    assert rows == [(2, "mm", "MatMulV2", 12.5), (3, "add", "Add", 1.5)]


@pytest.mark.parametrize(
    ("content", "entry", "bound"),
    [
        (b"Name,Type,Duration(us),Type\nmm,MatMulV2,1,x\n", "line 1 column 4", None),
        (("," * limits.MAX_CSV_COLUMNS + "\n").encode(), "line 1", limits.MAX_CSV_COLUMNS),
        (f'Name,Type,Duration(us)\n"{"x" * (limits.MAX_CSV_FIELD_CHARS + 1)}",Add,1\n'.encode(), "line 2",
         limits.MAX_CSV_FIELD_CHARS),
        (b"Name,Type,Duration(us)\nmm,MatMulV2,1\x00\n", "line 2", None),
        (b"Name,Type,Duration(us)\nmm,MatMulV2\n", "line 2", None),
        (codecs.BOM_UTF16_LE + b"N\x00a\x00\x00\xd8", "byte 6", None),  # a lone surrogate
        (b"Name,Type,Duration(us)\nmm,MatMulV2,1e13\n", "line 2 column 'Duration(us)'", limits.MAX_TIME_US),
    ],
    ids=["column-twice", "too-many-columns", "field-too-long", "nul", "short-row", "bad-utf-16", "time-too-long"],
)
def test_what_no_profiler_writes_is_refused_naming_file_place_and_bound(tmp_path, content, entry, bound):
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(content)
    with pytest.raises(CalibrationError) as caught:
        read_kernels(path)
    assert (caught.value.file, caught.value.entry, caught.value.bound) == (str(path), entry, bound)


def test_the_row_bound_is_checked_as_rows_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr("pytest_npufuse.files.csvfile.MAX_CSV_ROWS", 3)
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "1,2\n" * 3)
    assert len(read_table(path, PROFILE_CSV).rows) == 3
    path.write_text("a,b\n" + "1,2\n" * 4)
    with pytest.raises(CalibrationError) as caught:
        read_table(path, PROFILE_CSV)
    assert (caught.value.entry, caught.value.bound) == ("line 5", 3)
