"""The gate's library pieces without pytest runs: judging, merging, atomic writes, the model version."""

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_npufuse.cli.main import main
from pytest_npufuse.errors import BaselineError, OutputFileError
from pytest_npufuse.files import limits
from pytest_npufuse.files.atomic import write_text_atomic
from pytest_npufuse.gate import baseline
from pytest_npufuse.gate.comparison import site_deltas
from pytest_npufuse.gate.comparison_formats import UNLOCATED, located_lines
from pytest_npufuse.simulate.version import ModelIdentity
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import load_profile


def entry(variant_us: float, model_version: str = "m1") -> baseline.Entry:
    return baseline.Entry("max-autotune", 100.0, variant_us, round(100.0 / variant_us, 4), 1, 1, model_version)


@pytest.mark.parametrize(
    ("before", "after", "tolerance", "status"),
    [
        (100.0, 100.0, 0.0, baseline.UNCHANGED),
        (100.0, 100.001, 0.0, baseline.REGRESSED),
        (100.0, 105.0, 5.0, baseline.UNCHANGED),
        (100.0, 105.001, 5.0, baseline.REGRESSED),
        (100.0, 99.999, 5.0, baseline.IMPROVED),
    ],
)
def test_judge_is_exact_at_the_tolerance(before, after, tolerance, status):
    assert baseline.judge("t", "a3", entry(before), entry(after), tolerance).status == status


def test_judge_never_compares_across_model_versions_and_names_missing_sides():
    assert baseline.judge("t", "a3", entry(100.0, "m1"), entry(200.0, "m2"), 0.0).status == baseline.MODEL_CHANGED
    assert baseline.judge("t", "a3", None, entry(1.0), 0.0).status == baseline.NEW
    assert baseline.judge("t", "a3", entry(1.0), None, 0.0).status == baseline.REMOVED


def test_model_version_follows_profile_catalog_and_simulator():
    a2, a3, catalog = load_profile("a2"), load_profile("a3"), load_catalog()
    both = ModelIdentity.of([a3, a2], catalog)
    assert both == ModelIdentity.of([a2, a3], catalog) and len(both.version) == 16
    assert both.for_target("a3") == ModelIdentity.of([a3], catalog).version != both.for_target("a2")
    bumped = str(int(both.simulator) + 1)
    newer = ModelIdentity(bumped, both.catalog, both.profiles)
    assert newer.for_target("a3") != both.for_target("a3")
    assert newer.changes_from(both) == [f"simulator version {both.simulator} -> {bumped}"]
    assert ModelIdentity.from_json(both.to_json(), "x") == both


def test_results_round_trip_and_update_keeps_entries_not_run(tmp_path):
    model = ModelIdentity.of([load_profile("a3")], load_catalog())
    old = baseline.Results(None, {}).with_entries([("t1", "a3", entry(1.0)), ("t2", "a3", entry(2.0))], model)
    path = tmp_path / "b.json"
    baseline.write_baseline(path, old)
    assert baseline.load_baseline(path) == old
    gate = baseline.Gate.open(path, 0.0, True, model)
    change = gate.judge("t1", "a3", entry(3.0))
    assert change.status == baseline.REGRESSED and gate.failure(change) is None
    updated = gate.save([change]).results
    assert updated is not None and updated.get("t1", "a3") == entry(3.0) and updated.get("t2", "a3") == entry(2.0)
    assert baseline.load_baseline(path) == updated
    assert baseline.Gate.open(path, 0.0, False, model).save([change]).results is None


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "b.json"
    path.write_text("old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OutputFileError, match=r"b.json: writing 3 bytes failed \(disk full\).*left as it was"):
        write_text_atomic(path, "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_atomic_write_keeps_a_files_permissions_and_gives_a_new_one_the_usual_ones(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    write_text_atomic(kept, "new")
    assert kept.stat().st_mode & 0o777 == 0o640
    mask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "new.json", "new")
    finally:
        os.umask(mask)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644


def test_a_directory_is_refused_with_the_fix(tmp_path: Path):
    with pytest.raises(baseline.BaselineError) as exc:
        baseline.load_baseline(tmp_path)
    assert exc.value.file.endswith("/test_a_directory_is_refused_wi0")


def never_finishes(model_version: str = "m1") -> baseline.Entry:
    """A VARIANT that cannot finish (compile abort, modeled hang or deadlock)."""
    return baseline.Entry("max-autotune", 100.0, None, 0.0, 0, 1, model_version)


@pytest.mark.parametrize(
    ("before", "after", "status", "numbers"),
    [
        (entry(100.0), never_finishes(), baseline.REGRESSED, "variant 100.000 us -> does not finish, speedup 1.000x -> 0.000x"),
        (never_finishes(), entry(100.0), baseline.IMPROVED, "variant does not finish -> 100.000 us, speedup 0.000x -> 1.000x"),
        (never_finishes(), never_finishes(), baseline.UNCHANGED, "variant does not finish -> does not finish, speedup 0.000x -> 0.000x"),
    ],
)
def test_a_variant_that_does_not_finish_is_judged_and_stored_as_null(tmp_path, before, after, status, numbers):
    change = baseline.judge("t", "a3", before, after, 0.0)
    assert (change.status, change.numbers()) == (status, numbers)
    assert baseline.Entry.from_json(never_finishes().to_json(), "here") == never_finishes()
    assert never_finishes().to_json()["variant_us"] is None


KEY = "cases/t.py::test_x[a/b]"
AT = '.entries["cases/t.py::test_x[a/b]"].a3'


def entry_text(**numbers: str) -> str:
    fields = {"mode": '"max-autotune"', "baseline_us": "40.0", "variant_us": "30.0", "speedup": "1.3333",
              "segments": "1", "streams": "1", "model_version": '"v"', **numbers}
    body = ", ".join(f'"{key}": {value}' for key, value in fields.items())
    return ('{"tool": "pytest-npufuse", "kind": "baseline", "schema_version": 1, "model_version": null, '
            f'"model": null, "entries": {{"{KEY}": {{"a3": {{{body}}}}}}}}}')


@pytest.mark.parametrize(
    ("numbers", "key", "bound"),
    [
        ({"variant_us": "1e999"}, "variant_us", sys.float_info.max),  # reads as infinity
        ({"baseline_us": "-1e400"}, "baseline_us", sys.float_info.max),
        ({"segments": str(10**30)}, "segments", limits.MAX_JSON_INT),
        ({"streams": "9" * 5000}, "streams", limits.MAX_NUMBER_CHARS),
        ({"variant_us": "1e300"}, "variant_us", limits.MAX_TIME_US),  # a double, but no modeled run's time
        ({"speedup": "1e20"}, "speedup", baseline.MAX_SPEEDUP),
    ],
)
def test_a_baseline_with_a_number_past_a_bound_is_refused_naming_file_entry_and_bound(tmp_path, numbers, key, bound):
    path = tmp_path / "base.json"
    path.write_text(entry_text(**numbers))
    with pytest.raises(BaselineError) as caught:
        baseline.load_baseline(path)
    error = caught.value
    assert (error.file, error.entry, error.bound) == (str(path), f"{AT}.{key}", bound)
    assert path.read_text() == entry_text(**numbers)


def test_a_baseline_file_too_large_is_refused_naming_file_and_bound(tmp_path):
    path = tmp_path / "base.json"
    with path.open("wb") as handle:
        handle.truncate(200 * 1024 * 1024)
    with pytest.raises(BaselineError) as caught:
        baseline.load_baseline(path)
    assert (caught.value.file, caught.value.entry, caught.value.bound) == (str(path), None, limits.MAX_JSON_BYTES)
    assert "200.0 MiB" in str(caught.value)


def test_compare_names_the_entry_past_a_bound(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(entry_text())
    new.write_text(entry_text(variant_us="1e999"))
    assert main(["compare", str(old), str(new)]) == 2
    assert f"{new}: {AT}.variant_us: the number 1e999 is out of the range of a double" in capsys.readouterr().err


def test_an_entry_records_time_per_op_and_line_and_an_older_entry_without_it_still_reads(tmp_path):
    model = ModelIdentity.of([load_profile("a3")], load_catalog())
    sited = replace(entry(2.0), sites=(("aten::mm at model.py:34", 1.5, 2), ("SuperKernel sp1", 0.5, 1)))
    path = tmp_path / "b.json"
    baseline.write_baseline(path, baseline.Results(None, {}).with_entries([("new", "a3", sited), ("old", "a3", entry(1.0))], model))
    loaded = baseline.load_baseline(path)
    assert loaded.get("new", "a3").site_times() == {"aten::mm at model.py:34": (1.5, 2), "SuperKernel sp1": (0.5, 1)}
    assert loaded.get("old", "a3").sites is None and loaded.get("old", "a3").site_times() is None
    assert site_deltas(loaded.get("old", "a3"), sited) is None
    assert located_lines(None, {}) == [f"note: {UNLOCATED}."]


@pytest.mark.parametrize("sites", [{"aten::mm at m.py:1": [-1.0, 1]}, {"aten::mm at m.py:1": [1.0]}, ["x"]])
def test_a_malformed_sites_record_is_refused(tmp_path, sites):
    model = ModelIdentity.of([load_profile("a3")], load_catalog())
    path = tmp_path / "b.json"
    baseline.write_baseline(path, baseline.Results(None, {}).with_entries([("t", "a3", entry(1.0))], model))
    data = json.loads(path.read_text())
    data["entries"]["t"]["a3"]["sites"] = sites
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="'sites' is not an object of op site") as refused:
        baseline.load_baseline(path)
    assert refused.value.entry == "sites"


def test_site_deltas_name_the_op_that_grew_first_and_follow_a_line_that_only_moved():
    before = replace(entry(2.0), sites=(("aten::mm at m.py:10", 5.0, 1), ("aten::add at m.py:12", 1.0, 1)))
    after = replace(entry(3.0), sites=(("aten::mm at m.py:11", 5.0, 1), ("aten::add at m.py:13", 1.0, 1),
                                       ("aten::cumsum at m.py:14", 2.5, 1)))
    (grew,) = site_deltas(before, after)  # the mm and add moved down a line: unchanged, not gone and new
    assert (grew.name, grew.old_us, grew.new_us, grew.old_count, grew.new_count) == ("aten::cumsum at m.py:14", None, 2.5, 0, 1)
    lines = located_lines((grew,), {"aten::cumsum at m.py:14": "y = x.cumsum(0)"})
    assert lines[0] == "what changed most (VARIANT, baseline -> now):"
    assert lines[2].split() == ["aten::cumsum", "at", "m.py:14", "-", "2.500", "+2.500", "0", "->", "1", "y", "=", "x.cumsum(0)"]
