"""Concurrent writers of one baseline or run report: every entry survives, conflicts are named.

The fast test starts 8 plain Python processes that each add their own entry to the same 100 baseline
files, each process starting from an empty read (as a run that began before any other wrote): without
the lock and the re-read under it, most files would end with fewer than 8 entries. The pytest-level test
runs a few real ``pytest --npufuse-update-baseline`` processes at once on disjoint tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

from pytest_npufuse.gate import baseline
from pytest_npufuse.gate.run_document import read_run_tests, save_run_report
from pytest_npufuse.simulate.version import ModelIdentity

WRITERS = 8
ROUNDS = 100

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pytest_npufuse.gate.baseline import Entry, Results, update_baseline
    from pytest_npufuse.simulate.version import ModelIdentity

    folder, me, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model = ModelIdentity("1", "catalog", (("a3", "profile"),))
    entry = Entry("max-autotune", 10.0 + me, 9.0 + me, 1.1, 1, 1, "v")
    while not (folder / "go").exists():
        time.sleep(0.001)
    for n in range(rounds):
        update_baseline(folder / f"b{n}.json", Results(None, {}), [(f"cases/test_{me}.py::test", "a3", entry)], model)
    """
)


def test_eight_processes_updating_disjoint_entries_keep_all_eight_in_each_of_100_baselines(tmp_path):
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(me), str(ROUNDS)], stderr=subprocess.PIPE, text=True
        )
        for me in range(WRITERS)
    ]
    time.sleep(0.5)  # let every writer get to the start line
    (tmp_path / "go").touch()
    for writer in writers:
        _, errors = writer.communicate(timeout=300)
        assert writer.returncode == 0, errors
    for n in range(ROUNDS):
        entries = baseline.load_baseline(tmp_path / f"b{n}.json").entries
        assert sorted(entries) == [f"cases/test_{me}.py::test" for me in range(WRITERS)], f"b{n}.json lost entries"
        assert all(entries[f"cases/test_{me}.py::test"]["a3"].variant_us == 9.0 + me for me in range(WRITERS))
    assert not list(tmp_path.glob("*.tmp"))
    assert not list(tmp_path.glob(".*npufuse-lock")), "every writer removes its lock file"


def _entry(variant_us: float) -> baseline.Entry:
    return baseline.Entry("max-autotune", 10.0, variant_us, 1.0, 1, 1, "v")


MODEL = ModelIdentity("1", "catalog", (("a3", "profile"),))


def test_an_entry_another_process_changed_meanwhile_is_reported_as_a_conflict(tmp_path):
    path = tmp_path / "b.json"
    baseline.update_baseline(
        path, baseline.Results(None, {}), [("t", "a3", _entry(1.0)), ("u", "a3", _entry(1.0))], MODEL
    )
    read = baseline.load_baseline(path)  # this run starts
    baseline.update_baseline(path, read, [("t", "a3", _entry(2.0))], MODEL)  # another run writes t
    update = baseline.update_baseline(path, read, [("t", "a3", _entry(3.0)), ("u", "a3", _entry(1.0))], MODEL)
    assert update.conflicts == (baseline.Conflict("t", "a3", _entry(1.0), _entry(2.0), _entry(3.0)),)
    assert baseline.load_baseline(path).get("t", "a3") == _entry(3.0)
    message = update.describe(path)
    # What happened (the entry, its three values, who won) and what to do.
    assert str(path) in message and "t [a3]: 1.000 us when this run started, 2.000 us from the other process, " \
        "3.000 us from this run" in message
    assert "--npufuse-update-baseline" in message and "python -m pytest_npufuse merge" in message
    same = baseline.update_baseline(path, read, [("t", "a3", _entry(3.0))], MODEL)
    assert same.results is None and same.conflicts == () and same.agreed == ("t [a3]",)
    assert "the same values as this run for 1 entry (t [a3])" in same.describe(path)


def test_a_second_writer_says_what_the_first_wrote_meanwhile_and_that_nothing_was_lost(tmp_path):
    path = tmp_path / "b.json"
    read = baseline.load_baseline(path)  # both runs start from no file
    first = baseline.update_baseline(path, read, [(f"a{n}", "a3", _entry(1.0)) for n in range(7)], MODEL)
    assert first.describe(path) is None
    second = baseline.update_baseline(path, read, [("b", "a3", _entry(1.0))], MODEL)
    assert second.results is not None and second.conflicts == () and second.agreed == ()
    assert second.kept == tuple(f"a{n} [a3]" for n in range(7))
    assert "its 7 entries (a0 [a3], a1 [a3], a2 [a3], a3 [a3], a4 [a3], and 2 more) were kept" in second.describe(path)
    assert sorted(baseline.load_baseline(path).entries) == ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "b"]


def _rows(key: str) -> list[dict]:
    return [{"key": key, "target": "a3", **_entry(1.0).to_json()}]


def test_run_reports_written_during_each_others_runs_are_merged(tmp_path):
    path = tmp_path / "r.json"
    first = save_run_report(path, MODEL, {"t::a": ("passed", _rows("t::a"))}, None, seen=None)
    assert first == ["wrote " + str(path)]
    second = save_run_report(path, MODEL, {"t::b": ("failed", _rows("t::b"))}, None, seen=None)
    assert any("merged the run report" in note for note in second)
    _, tests = read_run_tests(path)
    assert {nodeid: outcome for nodeid, (outcome, _) in tests.items()} == {"t::a": "passed", "t::b": "failed"}
    assert sorted(json.loads(path.read_text())["entries"]) == ["t::a", "t::b"]


CASES = """
import torch


def test_0(npufuse):
    npufuse.check(lambda a: a @ a, torch.ones(8, 8))


def test_1(npufuse):
    npufuse.check(lambda a: a @ a + 1, torch.ones(8, 8))


def test_2(npufuse):
    npufuse.check(lambda a: (a @ a) * 2, torch.ones(8, 8))
"""


def test_concurrent_pytest_runs_updating_one_baseline_and_report_keep_every_test(pytester):
    pytester.makepyfile(test_case=CASES)
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "-k",
                f"test_{n}",
                "--npufuse-baseline=b.json",
                "--npufuse-update-baseline",
                "--npufuse-json=r.json",
            ],
            cwd=pytester.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for n in range(3)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    entries = baseline.load_baseline(pytester.path / "b.json").entries
    assert sorted(entries) == [f"test_case.py::test_{n}" for n in range(3)]
    # Each run notes the report as it was at configure, seconds before it writes: the runs overlap, so
    # the first to finish writes the report and the other two merge into it.
    _, tests = read_run_tests(pytester.path / "r.json")
    assert sorted(tests) == [f"test_case.py::test_{n}" for n in range(3)], outputs
    assert sum("merged the run report" in output for output in outputs) == 2, outputs
    # nothing is left in the user's tree beyond the files asked for: no lock files, no empty .benchmarks
    assert sorted(path.name for path in pytester.path.iterdir()) == ["b.json", "r.json", "test_case.py"]
