"""Reading msprof's kernel_details.csv and op_statistic.csv, and refusing what msprof never writes.

The profile in ``data/`` is the CATLASS 910B3 quant-matmul table (hicann/catlass, rows catlass-qmm-910b3-*
of benchmarks/data/published.toml) written as msprof writes a profile of ``data/quant_model.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_npufuse.calibrate.msprof import MAX_SHAPE_RANK, disagreements, read_kernels, read_profile
from pytest_npufuse.errors import CalibrationError

DATA = Path(__file__).parent / "data"
HEADER = "Step Id,Name,Type,Accelerator Core,Duration(us),Input Shapes"


def write(tmp_path: Path, text: str, name: str = "kernel_details.csv", encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding=encoding)
    return path


def test_the_published_profile_reads_kernel_by_kernel_with_shapes_and_statistics():
    profile = read_profile(DATA)
    assert [k.duration_us for k in profile.kernels] == [18.64, 23.23, 32.97, 47.73, 78.52, 75.39, 77.35]
    first = profile.kernels[0]
    assert (first.line, first.step, first.op_type, first.core) == (2, "1", "QuantBatchMatmulV3", "AI_CORE")
    assert first.shapes == ((128, 1024), (1024, 256), (256,), (128,))
    assert [(s.op_type, s.count, s.total_us) for s in profile.statistics] == [("QuantBatchMatmulV3", 7, 353.83)]
    assert disagreements(profile) == []


def test_the_profiler_output_directory_is_found_one_or_two_levels_down(tmp_path):
    output = tmp_path / "host_123_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    for name in ("kernel_details.csv", "op_statistic.csv"):
        shutil.copy(DATA / name, output / name)
    assert len(read_profile(tmp_path).kernels) == 7
    assert len(read_profile(tmp_path / "host_123_ascend_pt").kernels) == 7
    second = tmp_path / "host_456_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    second.mkdir(parents=True)
    shutil.copy(DATA / "kernel_details.csv", second)
    with pytest.raises(CalibrationError) as exc:
        read_profile(tmp_path)
    assert exc.value.file.endswith("/test_the_profiler_output_direc0")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError) as exc:
        read_profile(tmp_path / "empty")
    assert exc.value.entry == "kernel_details.csv"


def test_a_spreadsheets_semicolons_and_byte_order_mark_read_the_same_kernels(tmp_path):
    text = (DATA / "kernel_details.csv").read_text()
    resaved = write(tmp_path, "\ufeff" + _semicolon_csv(text))
    assert resaved.read_bytes().startswith(b"\xef\xbb\xbfStep Id;")
    assert read_kernels(resaved) == read_kernels(DATA / "kernel_details.csv")


def _semicolon_csv(text: str) -> str:
    """``text`` as a European spreadsheet saves it: ';' between fields, shapes quoted."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, delimiter=";", lineterminator="\r\n")
    writer.writerows(csv.reader(io.StringIO(text)))
    return out.getvalue()


def test_an_op_summary_csv_reads_with_msprofs_own_column_names(tmp_path):
    path = write(tmp_path, 'Op Name,OP Type,Task Type,Task Duration(us),Input Shapes\nmm,MatMulV2,AI_CORE,12.5,"4,8;8,16"\n',
                 name="op_summary_0_1.csv")
    (kernel,) = read_kernels(path)
    assert (kernel.name, kernel.op_type, kernel.duration_us, kernel.shapes) == ("mm", "MatMulV2", 12.5, ((4, 8), (8, 16)))


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("Step Id,Name,Type,Accelerator Core,Input Shapes\n1,mm,MatMulV2,AI_CORE,\"4,8\"\n",
         "line 1 column 'Duration(us)'"),
        ("Name,Type,Duration (us)\nmm,MatMulV2,12.5\n", "line 1 column 'Duration(us)'"),
        ("Name,Kind,Duration(us)\nmm,MatMulV2,12.5\n", "line 1 column 'Type'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,\"1.234,5\",\"4,8\"\n",
         "line 2 column 'Duration(us)'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"4,8\"\n1,mm,MatMulV2,AI_CORE,\"1,234.5\",\"4,8\"\n",
         "line 3 column 'Duration(us)'"),
        ("Name;Type;Duration(us)\nmm;MatMulV2;18,64\n", "line 2 column 'Duration(us)'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,N/A,\"4,8\"\n", "line 2 column 'Duration(us)'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,-3,\"4,8\"\n", "line 2 column 'Duration(us)'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,nan,\"4,8\"\n", "line 2 column 'Duration(us)'"),
        (f"{HEADER}\n1,mm,,AI_CORE,12.5,\"4,8\"\n", "line 2 column 'Type'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"4x8\"\n", "line 2 column 'Input Shapes'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"-4,8\"\n", "line 2 column 'Input Shapes'"),  # from 0 to 2**63-1
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"{10**30},8\"\n", "line 2 column 'Input Shapes'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"{','.join(['2'] * 9)}\"\n", "line 2 column 'Input Shapes'"),  # at most 8
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"{','.join(['1'] * 60000)}\"\n", "line 2 column 'Input Shapes'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5,\"\u0664,8\"\n", "line 2 column 'Input Shapes'"),
        (f"{HEADER}\n1,mm,MatMulV2,AI_CORE,12.5\n", "line 2"),
        ("Step Id;Name;Type;Accelerator Core;Duration(us);Input Shapes\n1;mm;MatMulV2;AI_CORE;12.5;4,8;8,16\n",
         "line 2"),
        (f"{HEADER}\n", None),
        ("", "line 1 column 'Type'"),
    ],
    ids=["no-duration", "near-name", "no-type", "decimal-comma", "thousands", "semicolon-locale", "n/a", "negative",
         "nan", "empty-type", "bad-shapes", "negative-dim", "int64-dim", "nine-dims", "huge-cell", "unicode-digit",
         "short-row", "unquoted-shapes", "no-rows", "empty-file"],
)
def test_hostile_kernel_details_are_clear_errors_naming_the_line_and_the_fix(tmp_path, text, entry):
    with pytest.raises(CalibrationError) as caught:
        read_kernels(write(tmp_path, text))
    assert (caught.value.file, caught.value.entry) == (str(tmp_path / "kernel_details.csv"), entry)


def test_a_file_that_is_not_utf8_or_not_a_file_is_refused_by_name(tmp_path):
    latin = tmp_path / "kernel_details.csv"
    latin.write_bytes("Name,Type,Duration(us)\nm\u00e9,MatMulV2,1\n".encode("latin-1"))
    with pytest.raises(CalibrationError) as exc:
        read_kernels(latin)
    assert exc.value.file.endswith("/kernel_details.csv")
    with pytest.raises(CalibrationError) as exc:
        read_profile(tmp_path / "missing")
    assert exc.value.file.endswith("/missing")


def test_a_fifo_or_a_symlink_loop_given_as_the_profile_is_named_as_such(tmp_path):
    """Both were reported as 'no such profile', which sends the user looking for a missing file."""
    fifo = tmp_path / "kernel_details.csv"
    os.mkfifo(fifo)
    with pytest.raises(CalibrationError) as exc:  # a FIFO, not a regular file
        read_profile(fifo)
    assert exc.value.file == str(fifo)
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    with pytest.raises(CalibrationError) as exc:  # a symlink loop
        read_profile(loop)
    assert exc.value.file == str(loop)


def test_the_shapes_of_a_profile_that_repeats_them_read_the_same_each_time(tmp_path):
    rows = "".join(f'{i},mm,MatMulV2,AI_CORE,1.5,"[4, 8];8,16;"\n' for i in range(50))
    kernels = read_kernels(write(tmp_path, f"{HEADER}\n{rows}"))
    assert {k.shapes for k in kernels} == {((4, 8), (8, 16), ())}


def test_op_statistic_disagreeing_with_kernel_details_is_reported(tmp_path):
    shutil.copy(DATA / "kernel_details.csv", tmp_path)
    write(tmp_path, "OP Type,Core Type,Count,Total Time(us)\nQuantBatchMatmulV3,AI_CORE,9,400\n", "op_statistic.csv")
    (note,) = disagreements(read_profile(tmp_path))
    assert note.startswith("op_statistic.csv line 2: QuantBatchMatmulV3 has Count 9, Total Time 400 us, but "
                           "kernel_details.csv has 7 kernel(s)")
    write(tmp_path, "OP Type,Core Type,Count,Total Time(us)\nQuantBatchMatmulV3,AI_CORE,7.5,400\n", "op_statistic.csv")
    with pytest.raises(CalibrationError) as exc:
        read_profile(tmp_path)
    assert exc.value.entry == "line 2 column 'Count'"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(st.text(alphabet="0123456789,;[]() -+.e\u0664\u00b2x\"", max_size=120))
def test_any_input_shapes_cell_reads_as_bounded_shapes_or_an_error_naming_its_line(tmp_path, cell):
    path = tmp_path / "kernel_details.csv"
    path.write_text(f"{HEADER}\n1,mm,MatMulV2,AI_CORE,1.5,\"{cell.replace(chr(34), chr(34) * 2)}\"\n")
    try:
        (kernel,) = read_kernels(path)
    except CalibrationError as exc:
        assert "line 2" in str(exc)
        return
    for shape in kernel.shapes or ():
        assert len(shape) <= MAX_SHAPE_RANK and all(isinstance(d, int) and 0 <= d < 2**63 for d in shape)
