"""One table of a user's TOML file added or replaced, every other byte kept."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_npufuse.errors import ProfileError
from pytest_npufuse.files.tomledit import basic_string, dotted, key_parts, with_table

PARTS = ("tool", "npufuse", "targets", "mine")
BLOCK = '[tool.npufuse.targets.mine]\nbase = "910b3"\n\n[tool.npufuse.targets.mine.efficiency]\ncompute = 0.8\n'
USER = '''# the user's project
[project]
name = "demo"   # a comment kept

[tool.npufuse.targets.mine]   # calibrated last week
base = "a3"

[tool.npufuse.targets.mine.overhead_us]
kernel_head = 3.0

[tool.black]
doc = """
[tool.npufuse.targets.mine]
"""
'''


def test_a_new_table_is_appended_and_the_file_before_it_is_byte_for_byte_the_same():
    edited = with_table(USER, ("tool", "npufuse", "targets", "other"), BLOCK.replace("mine", "other"), "p", replace=False)
    assert edited.startswith(USER)
    assert edited[len(USER):] == "\n" + BLOCK.replace("mine", "other")


def test_an_existing_table_is_kept_without_force_and_replaced_in_place_with_it():
    with pytest.raises(ProfileError) as exc:
        with_table(USER, PARTS, BLOCK, "p", replace=False)
    assert exc.value.entry == "[tool.npufuse.targets.mine]"
    edited = with_table(USER, PARTS, BLOCK, "p", replace=True)
    head, tail = USER.split("[tool.npufuse.targets.mine]   #", 1)
    assert edited.startswith(head + BLOCK + "\n[tool.black]")
    assert edited.endswith('doc = """\n[tool.npufuse.targets.mine]\n"""\n')  # a header inside a string is text
    assert "kernel_head" not in edited


def test_sub_tables_written_apart_from_their_table_are_all_replaced():
    text = '[tool.npufuse.targets.mine]\nbase = "a3"\n\n[tool.other]\nx = 1\n\n[tool.npufuse.targets.mine.cores]\naic = 2\n'
    edited = with_table(text, PARTS, BLOCK, "p", replace=True)
    assert edited == BLOCK + "\n[tool.other]\nx = 1\n\n"


def test_windows_line_ends_and_a_missing_final_newline_are_kept_around_the_new_table():
    text = "[project]\r\nname = 'x'"
    block = BLOCK.replace("\n", "\r\n")
    edited = with_table(text, PARTS, block, "p", replace=False)
    assert edited == text + "\r\n\r\n" + block
    assert with_table("", PARTS, BLOCK, "p", replace=False) == BLOCK


@pytest.mark.parametrize(
    ("text", "table"),
    [
        ('[tool.npufuse.targets]\nmine = { base = "a3" }\n', "[tool.npufuse.targets.mine]"),  # defined inline
        ('[tool.npufuse]\ntargets.mine.base = "a3"\n', "[tool.npufuse.targets.mine]"),  # with dotted keys
        ('[tool.npufuse]\ntargets = { other = { base = "a3" } }\n', "[tool.npufuse.targets.mine]"),  # parent inline
        ("[tool.npufuse\n", None),  # not valid TOML: the file is at fault, not the table
    ],
    ids=["inline", "dotted", "inline-parent", "broken"],
)
def test_what_a_text_edit_cannot_do_safely_is_an_error_and_nothing_changes(text, table):
    with pytest.raises(ProfileError) as exc:
        with_table(text, PARTS, BLOCK, "p", replace=True)
    assert (exc.value.file, exc.value.entry) == ("p", table)


def test_header_keys_are_read_with_quotes_and_spaces():
    assert key_parts(' tool . npufuse."targets" . \'a b\' ') == ("tool", "npufuse", "targets", "a b")


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(st.characters(codec="utf-8")))
def test_any_text_is_written_as_a_toml_string_and_key_that_read_back_the_same(text):
    """json.dumps, used before for the op types of [corrections], is not TOML: U+007F stayed raw and a
    character beyond U+FFFF became two surrogate escapes, and the calibrated table failed to parse."""
    assert tomllib.loads(f"k = {basic_string(text)}")["k"] == text
    assert tomllib.loads(f"[{dotted(('tool', text))}]\n")["tool"] == {text: {}}
