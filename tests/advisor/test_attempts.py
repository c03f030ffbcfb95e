"""``advise --json FILE``: each run appends one attempt to the record; a file that is not a record is
refused before the model runs and left as it was."""

import io
import json

from pytest_npufuse.cli.main import main

FACTORY = '''
import torch


def f():
    return (lambda a: (a @ a) @ a), (torch.ones(8, 8),)
'''


def test_each_run_appends_its_attempt(tmp_path):
    (tmp_path / "small.py").write_text(FACTORY)
    record = tmp_path / "advise.json"
    for options in ("", "strict-scope-check=abort"):
        assert main(["advise", f"{tmp_path / 'small.py'}:f", "--options", options, "--json", str(record)], io.StringIO()) == 0
    document = json.loads(record.read_text())
    first, second = document["attempts"]
    assert (first["options"], second["options"]) == ("", "strict-scope-check=abort")
    assert first["factory"].endswith("small.py:f") and first["recommendation"]["layout"]
    assert [c["layout"] for c in first["candidates"]] and first["target"] == second["target"]


def test_a_file_that_is_not_a_record_is_refused_and_kept(tmp_path, capsys):
    (tmp_path / "small.py").write_text(FACTORY)
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    assert main(["advise", f"{tmp_path / 'small.py'}:f", "--json", str(notes)], io.StringIO()) == 2
    assert "is not an advise record" in capsys.readouterr().err and notes.read_text() == '{"mine": true}\n'
