"""The one text-table aligner: the gate's tables, the CLI's and the advisor's ranked layouts all print
through it, byte for byte as each printed its own before."""

from pytest_npufuse.report.table import aligned

ROWS = [
    ("test", "target", "before us", "now us", "change"),
    ("tests/test_model.py::test_decode[bs=1]", "a3", "412.5", "398.0", "-3.5%"),
    ("t", "910b4", "1.0", "", ""),
]


def _padded(rows):
    """The expression both callers wrote before the aligner had one home."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def test_columns_are_padded_to_the_widest_cell_two_spaces_apart_without_trailing_blanks():
    assert aligned(ROWS) == [
        "test                                    target  before us  now us  change",
        "tests/test_model.py::test_decode[bs=1]  a3      412.5      398.0   -3.5%",
        "t                                       910b4   1.0",
    ]
    assert aligned(ROWS) == _padded(ROWS)


def test_a_name_holding_a_terminal_escape_is_shown_escaped_and_measured_as_shown():
    rows = [("scope", "time"), ("attn\x1b[2J", "1.0"), ("mlp", "2.0")]
    assert aligned(rows) == ["scope        time", "attn\\x1b[2J  1.0", "mlp          2.0"]
