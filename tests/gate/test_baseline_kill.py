"""Fault test of the baseline writer: ``kill -9`` at many moments of a rewrite never loses the file.

A child process rewrites one baseline over and over, alternating between two versions; the parent
kills it with SIGKILL at a different delay each round. After every kill the file must parse as a
complete baseline equal to one of the two versions, and the next write must remove the temporary
file the killed writer may have left.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_npufuse.files.atomic import remove_stale_temporaries, write_text_atomic
from pytest_npufuse.gate.baseline import Entry, Results, dumps, load_baseline, write_baseline

KILLS = 40

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pytest_npufuse.files.atomic import write_text_atomic
    from pytest_npufuse.gate.baseline import Entry, Results, dumps

    def version(n):
        entry = Entry("max-autotune", 100.0 + n, 90.0 + n, 1.1, 1, 1, "v")
        return dumps(Results(None, {f"cases/test_{i}.py::test_case": {"a3": entry} for i in range(3000)}).to_json("baseline"))

    # write_baseline is dumps + write_text_atomic; the text is built once so that every kill point
    # falls inside the file-system part, where a file can be lost.
    path = Path(sys.argv[1])
    versions = (version(0), version(1))
    start = time.perf_counter()
    write_text_atomic(path, versions[0], "baseline")
    print(time.perf_counter() - start, flush=True)
    n = 1
    while True:
        write_text_atomic(path, versions[n % 2], "baseline")
        n += 1
    """
)


def _variant_of(path: Path) -> float:
    """The version the file holds; it must parse completely, with every entry of one version."""
    results = load_baseline(path)
    assert len(results.entries) == 3000
    times = {entry.variant_us for targets in results.entries.values() for entry in targets.values()}
    assert len(times) == 1, "a file mixing two versions"
    return times.pop()


def test_kill_9_at_any_moment_leaves_the_old_or_the_new_baseline(tmp_path):
    """Kill points spread evenly over one and a half rewrites (the child measures how long one takes),
    so kills land while stale files are cleaned, while the temporary file is written and synced, and
    around the rename."""
    path = tmp_path / "baseline.json"
    seen: dict[float, int] = {}
    temporaries_left = 0
    for kill in range(KILLS):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        one_write = float(child.stdout.readline())
        time.sleep(one_write * 1.5 * kill / KILLS)
        child.send_signal(signal.SIGKILL)
        child.wait()
        version = _variant_of(path)
        seen[version] = seen.get(version, 0) + 1
        temporaries = list(tmp_path.glob(".baseline.json.npufuse-*.tmp"))
        assert len(temporaries) <= 1
        temporaries_left += len(temporaries)
        assert sorted(remove_stale_temporaries(path)) == sorted(temporaries)
        assert not list(tmp_path.glob(".*.tmp"))
    assert set(seen) <= {90.0, 91.0} and sum(seen.values()) == KILLS
    print(f"{KILLS} kills: old version {seen.get(90.0, 0)}, new version {seen.get(91.0, 0)}, "
          f"stale temporaries left by the killed writer and removed {temporaries_left}")


def test_the_next_write_removes_a_dead_writers_temporary_and_keeps_a_live_ones(tmp_path):
    path = tmp_path / "baseline.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".baseline.json.npufuse-{int(dead.stdout)}-0.tmp"
    stale.write_text("half a fil")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        in_flight = tmp_path / f".baseline.json.npufuse-{live.pid}-0.tmp"
        in_flight.write_text("another writer")
        write_baseline(path, Results(None, {}))
        assert not stale.exists() and in_flight.exists()
    finally:
        live.kill()
        live.wait()


def test_a_symlinked_baseline_is_written_through_to_its_target(tmp_path):
    target = tmp_path / "store" / "baseline.json"
    target.parent.mkdir()
    target.write_text(dumps(Results(None, {}).to_json("baseline")))
    link = tmp_path / "baseline.json"
    link.symlink_to(target)
    entry = Entry("max-autotune", 2.0, 1.0, 2.0, 1, 1, "v")
    write_baseline(link, Results(None, {"t::a": {"a3": entry}}))
    assert link.is_symlink() and load_baseline(target).get("t::a", "a3") == entry


def test_a_read_only_baseline_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text("original")
    path.chmod(0o444)
    with pytest.raises(Exception) as exc:
        write_text_atomic(path, "new", "baseline")
    assert exc.value.file.endswith("/baseline.json")
    assert path.read_text() == "original" and not list(tmp_path.glob(".*.tmp"))
