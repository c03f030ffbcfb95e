"""The fenced code blocks of the docs, each with what its docs test does with it.

A block is told how it is tested by an HTML comment on the line before its fence (invisible on the site and
on GitHub), ``<!-- test: WORD ...; WORD ... -->``:

- ``skip REASON``: not run; the reason is required, and such blocks are few (``tests/docs/test_code_blocks.py``
  counts them). Only for what cannot run here: a package CI does not install, a job of another CI system;
- ``ci``: a shell block each of whose commands is a line of ``.ci/run``: CI runs it word for word;
- ``file PATH``: a Python or TOML block is written to PATH in the page's directory, for the blocks after it;
- ``fails``: the block (a test file, a command) must fail;
- ``continues``: a Python script run in the names the page's previous script left;
- ``output``: a text block that the previous run (a test file, a command, a script) printed, line by line in
  order; ``...`` stands for any text, numbers may differ (the model is recalibrated), runs of spaces are one;
- ``written PATH``: a TOML block shown as the file PATH a command wrote, compared like ``output``.

Without a comment, a ``python`` block with a ``def test_`` is a test file, saved as ``test_NAME.py`` after its first
test and run with pytest and the plugin, and any other ``python`` block a script; a ``bash`` block runs each command in the page's directory; a ``toml``
block is checked against the product's schema; a ``yaml`` block is parsed and its commands checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(\s*)(```+)\s*([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*test:\s*(.*?)\s*-->\s*$")
WORDS = ("skip", "ci", "file", "fails", "continues", "output", "written")


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line of its opening fence, its language, its text and its directive
    words (each with the rest of its clause: ``{"file": "cases/test_sp1.py"}``)."""

    page: str
    line: int
    language: str
    text: str
    words: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def has(self, word: str) -> bool:
        return word in self.words

    @property
    def is_test_file(self) -> bool:
        return self.language == "python" and re.search(r"^def test_", self.text, re.M) is not None


def pages() -> list[Path]:
    """The README and every page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _words(comment: str, where: str) -> dict[str, str]:
    if comment.startswith("skip"):  # the reason is the rest, whatever it holds
        return {"skip": comment[len("skip"):].strip(" :")}
    words = {}
    for clause in filter(None, (part.strip() for part in comment.split(";"))):
        word, _, rest = clause.partition(" ")
        word = word.rstrip(":")
        if word not in WORDS:
            raise ValueError(f"{where}: unknown docs-test word {word!r}; use one of {', '.join(WORDS)}")
        words[word] = rest.strip()
    return words


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the directive of the comment right above it."""
    name = page.relative_to(ROOT).as_posix()
    lines = page.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence, language = opening.groups()
        start, index = index, index + 1
        body = []
        while index < len(lines) and lines[index].strip() != fence:
            body.append(lines[index][len(indent):] if lines[index].startswith(indent) else lines[index].lstrip())
            index += 1
        above = lines[start - 1] if start > 0 else ""
        directive = _DIRECTIVE.match(above)
        words = _words(directive.group(1), f"{name}:{start + 1}") if directive else {}
        found.append(Block(name, start + 1, language, "\n".join(body) + "\n", words))
        index += 1
    return found


def commands(text: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", "", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _pattern(line: str) -> re.Pattern[str]:
    """A line of a shown output as a pattern: ``...`` any text, a number any number, spaces any spaces."""
    parts = []
    for piece in re.split(r"(\s*\.\.\.\s*|[-+]?\d+(?:\.\d+)?|\s+)", line.strip()):
        piece = "..." if piece.strip() == "..." else piece
        if piece == "...":
            parts.append(".*?")
        elif piece and _NUMBER.fullmatch(piece):
            parts.append(r"[-+]?\d+(?:\.\d+)?")
        elif piece and piece.isspace():
            parts.append(r"\s+")
        elif piece:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def unmatched(shown: str, printed: str) -> str | None:
    """The first line of ``shown`` that ``printed`` does not have, after the lines matched before it (None
    when every line is found, in order)."""
    lines = [line.strip() for line in printed.splitlines()]
    position = 0
    for line in filter(str.strip, shown.splitlines()):
        pattern = _pattern(line)
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return line
        position += 1
    return None
