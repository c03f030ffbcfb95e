"""``python -m pytest_npufuse merge OUT IN...``: the run reports or baselines of CI shards as one file."""

import json
from pathlib import Path

import pytest

from pytest_npufuse.cli.main import main as cli
from pytest_npufuse.errors import BaselineError
from pytest_npufuse.gate import baseline
from pytest_npufuse.gate.merge import merge_documents
from pytest_npufuse.gate.run_document import run_document, write_run_report
from pytest_npufuse.simulate.version import ModelIdentity

MODEL = ModelIdentity("2", "c" * 16, (("a3", "p" * 16),))


def entry(variant_us: float, model: ModelIdentity = MODEL, target: str = "a3") -> baseline.Entry:
    return baseline.Entry("max-autotune", 40.0, variant_us, round(40.0 / variant_us, 4), 1, 1, model.for_target(target))


def shard(path: Path, tests: dict[str, float], model: ModelIdentity = MODEL, target: str = "a3", failed=()) -> Path:
    """A run report of ``tests`` (node id -> variant us), as ``--npufuse-json`` writes it."""
    records = {
        nodeid: ("failed" if nodeid in failed else "passed",
                 [{"key": nodeid, "target": target, **entry(us, model, target).to_json()}])
        for nodeid, us in tests.items()
    }
    write_run_report(path, run_document(model, records, None))
    return path


def base(path: Path, tests: dict[str, float], model: ModelIdentity = MODEL) -> Path:
    entries = [(nodeid, "a3", entry(us, model)) for nodeid, us in tests.items()]
    baseline.write_baseline(path, baseline.Results(None, {}).with_entries(entries, model))
    return path


def test_two_shards_merge_into_the_report_one_serial_run_writes(tmp_path, capsys):
    one = shard(tmp_path / "shard1.json", {"t.py::test_a": 30.0}, failed=("t.py::test_a",))
    two = shard(tmp_path / "shard2.json", {"t.py::test_b": 31.0, "u.py::test_c": 32.0})
    whole = shard(tmp_path / "serial.json", {"t.py::test_a": 30.0, "t.py::test_b": 31.0, "u.py::test_c": 32.0},
                  failed=("t.py::test_a",))
    assert cli(["merge", str(tmp_path / "all.json"), str(one), str(two)]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'all.json'}: run of 3 entries, 3 test(s) from 2 file(s)\n"
    assert (tmp_path / "all.json").read_text() == whole.read_text()
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["summary"] == {"failed": 1, "passed": 2}

    # The merged run report gates once against a baseline, and can become the next baseline.
    committed = base(tmp_path / "base.json", {"t.py::test_a": 30.0, "t.py::test_b": 30.0, "u.py::test_c": 32.0})
    assert cli(["compare", str(committed), str(tmp_path / "all.json")]) == 1
    assert "1 regressed, 2 unchanged" in capsys.readouterr().out
    assert cli(["merge", str(tmp_path / "next.json"), str(one), str(two), "--baseline"]) == 0
    assert json.loads((tmp_path / "next.json").read_text())["kind"] == "baseline"
    assert baseline.load_baseline(tmp_path / "next.json").get("t.py::test_b", "a3").variant_us == 31.0


def test_baselines_of_different_targets_merge_and_keep_both_profiles(tmp_path):
    a2_model = ModelIdentity("2", "c" * 16, (("a2", "q" * 16),))
    one = base(tmp_path / "a3.json", {"t.py::test_a": 30.0})
    two = tmp_path / "a2.json"
    baseline.write_baseline(two, baseline.Results(None, {}).with_entries([("t.py::test_a", "a2", entry(50.0, a2_model, "a2"))], a2_model))
    assert cli(["merge", str(tmp_path / "out.json"), str(one), str(two)]) == 0
    merged = baseline.load_baseline(tmp_path / "out.json")
    assert merged.pairs() == [("t.py::test_a", "a2"), ("t.py::test_a", "a3")]
    assert dict(merged.model.profiles) == {"a2": "q" * 16, "a3": "p" * 16}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: [shard(d / "s1.json", {"t.py::test_a": 30.0}),
                    shard(d / "s2.json", {"t.py::test_a": 30.0, "t.py::b": 1.0})],
         "entry t.py::test_a [a3] is in both {d}/s1.json and {d}/s2.json; each shard must run different tests"),
        (lambda d: [shard(d / "s1.json", {"t.py::test_a": 30.0}),
                    shard(d / "s2.json", {"t.py::test_b": 30.0}, ModelIdentity("3", "c" * 16, MODEL.profiles))],
         "{d}/s2.json was measured with another model version than {d}/s1.json (simulator version 2 -> 3); "
         "run every shard with the same pytest-npufuse"),
        (lambda d: [shard(d / "s1.json", {"t.py::test_a": 30.0}),
                    shard(d / "s2.json", {"t.py::test_b": 30.0}, ModelIdentity("2", "c" * 16, (("a3", "r" * 16),)))],
         f"(profile a3 {'p' * 16} -> {'r' * 16})"),
        (lambda d: [shard(d / "s1.json", {"t.py::test_a": 30.0}), base(d / "b.json", {"t.py::test_b": 30.0})],
         "cannot merge baselines with run reports: {d}/s1.json (run), {d}/b.json (baseline)"),
    ],
)
def test_mismatches_are_refused_naming_file_and_key_and_nothing_is_written(tmp_path, capsys, make, message):
    inputs = make(tmp_path)
    assert cli(["merge", str(tmp_path / "out.json"), *map(str, inputs)]) == 2
    assert message.format(d=tmp_path) in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_an_existing_output_is_kept_unless_it_is_an_input_or_forced(tmp_path, capsys):
    one, two = shard(tmp_path / "s1.json", {"t.py::test_a": 30.0}), shard(tmp_path / "s2.json", {"t.py::test_b": 30.0})
    before = one.read_text()
    assert cli(["merge", str(two), str(two), str(one)]) == 0  # OUT is an input: merging into it is asked for
    assert sorted(json.loads(two.read_text())["tests"]) == ["t.py::test_a", "t.py::test_b"]
    assert cli(["merge", str(tmp_path / "out.json"), str(one), str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err and not (tmp_path / "out.json").exists()
    (tmp_path / "keep.json").write_text("mine")
    assert cli(["merge", str(tmp_path / "keep.json"), str(one)]) == 2
    assert "keep.json exists and is not one of the inputs; give a new path, or --force" in capsys.readouterr().err
    assert (tmp_path / "keep.json").read_text() == "mine" and one.read_text() == before
    assert cli(["merge", str(tmp_path / "keep.json"), str(one), "--force"]) == 0


def test_a_shard_given_twice_or_copied_is_merged_once_and_said_so(tmp_path, capsys):
    one = shard(tmp_path / "s1.json", {"t.py::test_a": 30.0})
    two = shard(tmp_path / "s2.json", {"t.py::test_b": 31.0})
    copy = tmp_path / "copy-of-s2.json"
    copy.write_bytes(two.read_bytes())
    assert cli(["merge", str(tmp_path / "once.json"), str(one), str(two)]) == 0
    capsys.readouterr()
    assert cli(["merge", str(tmp_path / "out.json"), str(one), str(two), str(one), str(copy)]) == 0
    out = capsys.readouterr().out
    assert f"skipped {one}: the same shard as {one}" in out and f"skipped {copy}: the same shard as {two}" in out
    assert (tmp_path / "out.json").read_text() == (tmp_path / "once.json").read_text()


def run_with_gate(path: Path, tests: dict[str, float], gate: dict | None) -> Path:
    records = {nodeid: ("passed", [{"key": nodeid, "target": "a3", **entry(us).to_json()}])
               for nodeid, us in tests.items()}
    write_run_report(path, run_document(MODEL, records, gate))
    return path


def test_shards_run_with_other_gate_options_are_refused_naming_both(tmp_path):
    gate = {"file": "base.json", "tolerance_pct": 0.0, "update": False}
    one = run_with_gate(tmp_path / "s1.json", {"t.py::test_a": 30.0}, gate)
    two = run_with_gate(tmp_path / "s2.json", {"t.py::test_b": 30.0}, {**gate, "tolerance_pct": 5.0})
    three = run_with_gate(tmp_path / "s3.json", {"t.py::test_c": 30.0}, None)
    for other in (two, three):
        with pytest.raises(BaselineError) as caught:
            merge_documents([one, other])
        assert (caught.value.file, caught.value.entry) == (str(other), ".gate")
        assert str(one) in str(caught.value)
    document, notes = merge_documents([one, run_with_gate(tmp_path / "s4.json", {"t.py::test_d": 1.0}, gate)])
    assert document["gate"] == gate and notes == []


def test_refusals_name_the_file_and_the_entry_as_fields(tmp_path):
    one = shard(tmp_path / "s1.json", {"t.py::test_a": 30.0})
    twice = shard(tmp_path / "s2.json", {"t.py::test_a": 31.0})
    other_model = shard(tmp_path / "s3.json", {"t.py::test_b": 30.0}, ModelIdentity("3", "c" * 16, MODEL.profiles))
    for inputs, entry_at in (([one, twice], "t.py::test_a [a3]"), ([one, other_model], ".model")):
        with pytest.raises(BaselineError) as caught:
            merge_documents(inputs)
        assert (caught.value.file, caught.value.entry) == (str(inputs[1]), entry_at)


def test_a_run_report_naming_no_model_is_refused_rather_than_its_entries_lost(tmp_path):
    one = shard(tmp_path / "s1.json", {"t.py::test_a": 30.0})
    bare = tmp_path / "s2.json"
    document = json.loads(shard(bare, {"t.py::test_b": 30.0}).read_text())
    bare.write_text(json.dumps({**document, "model": None}))
    with pytest.raises(BaselineError) as caught:
        merge_documents([one, bare])
    assert (caught.value.file, caught.value.entry) == (str(bare), ".model")
