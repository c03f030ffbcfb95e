"""A write the system refuses (disk full, quota, ``ulimit -f``) names the file, the cause and the fix, and
the file keeps its old content: the new text only ever reached a temporary file, which is removed."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_npufuse.errors import OutputFileError
from pytest_npufuse.files import write_text

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("code", "fix"), [
    (errno.ENOSPC, "the disk is full"), (errno.EDQUOT, "disk quota"), (errno.EFBIG, "ulimit -f"),
    (errno.EIO, "fix the cause and run again"),
])
def test_a_refused_write_is_named_and_the_old_file_is_kept(tmp_path, monkeypatch, code, fix):
    path = tmp_path / "baseline.json"
    path.write_text("the old baseline")

    def full(_descriptor):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputFileError) as exc:  # writing 9 bytes failed; the old file is left as it was
        write_text(path, "new text!", "baseline")
    assert exc.value.file == str(path) and fix in exc.value.problem
    assert path.read_text() == "the old baseline"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.json"]


def _small_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_merge_under_a_file_size_limit_exits_2_naming_the_limit_and_keeps_the_old_output(tmp_path):
    """``ulimit -f`` during a writer: Python ignores SIGXFSZ, so the write fails with EFBIG, which was printed
    as a bare ``[Errno 27] File too large``."""
    from test_fuzz import VALID_RUN

    shards = []
    for shard in range(2):
        path = tmp_path / f"shard{shard}.json"
        path.write_bytes(VALID_RUN.replace(b"t::a", f"t{shard}::{'a' * 3000}".encode()))
        shards.append(str(path))
    out = tmp_path / "merged.json"
    out.write_text("old")
    done = subprocess.run([sys.executable, "-m", "pytest_npufuse", "merge", str(out), *shards, "--force"],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          preexec_fn=_small_file_limit, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"merged file {out}: writing" in done.stderr and "ulimit -f" in done.stderr
    assert out.read_text() == "old"


def test_an_append_the_system_stops_part_way_is_cut_back_to_the_old_end(tmp_path):
    """``ulimit -f`` during a log append (the plog): the error names the file and the limit, and the log ends
    where it ended, not in half a record."""
    log = tmp_path / "plog.log"
    log.write_text("an old record\n")
    script = (
        "import resource, sys; from pathlib import Path; from pytest_npufuse.files import append_text; "
        "from pytest_npufuse.errors import OutputFileError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        f"try:\n    append_text(Path({str(log)!r}), 'x' * 10000, 'plog')\n"
        "except OutputFileError as exc:\n    print(exc.file, exc.bound, exc.problem)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.startswith(f"{log} 10000 plog {log}: writing 10000 bytes failed") and "ulimit -f" in done.stdout
    assert log.read_text() == "an old record\n"
