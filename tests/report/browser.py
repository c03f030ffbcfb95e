"""Headless Chromium for the HTML report's tests, its render benchmark and the docs' pictures.

No driver and no Python dependency: Chromium's own ``--dump-dom`` (the DOM after the page's scripts
ran) and ``--screenshot`` are enough, and the stdlib HTML parser reads the dumped DOM. Every launch
gets a fresh profile directory and no network features, so nothing outside the page is fetched.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

EXECUTABLES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)
TIMEOUT_S = 180


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, EXECUTABLES) if path), None)


@dataclass
class Element:
    """A parsed element; ``content`` holds its child elements and text runs in document order."""

    tag: str
    attrs: dict[str, str]
    content: list["Element | str"] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self):
        yield self
        for child in self.content:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list["Element"]:
        """Descendants (and self) with this tag, this class and these attribute values (``data_x`` is ``data-x``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [
            e for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
            and all(e.attrs.get(name) == value for name, value in wanted.items())
        ]

    def all_text(self) -> str:
        return "".join(child if isinstance(child, str) else child.all_text() for child in self.content)


_VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].content.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].content.append(Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].content.append(data)


def parse_dom(text: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(text)
    return builder.root


class Chromium:
    """One headless Chromium executable; each call is a fresh browser with a throw-away profile."""

    def __init__(self, executable: str) -> None:
        self.executable = executable

    def _run(self, url: str, *extra: str) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="npufuse-chromium-") as profile:
            return subprocess.run(
                [self.executable, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
            )

    def dom(self, page: Path, fragment: str = "", size: tuple[int, int] | None = None) -> Element:
        """The page's DOM after its scripts ran, parsed; laid out in a window of ``size`` pixels if given."""
        window = (f"--window-size={size[0]},{size[1]}",) if size else ()
        return parse_dom(self._run(page.resolve().as_uri() + fragment, *window, "--dump-dom").stdout)

    def screenshot(self, page: Path, png: Path, width: int = 1280, height: int = 900, fragment: str = "") -> Path:
        self._run(page.resolve().as_uri() + fragment, f"--window-size={width},{height}", f"--screenshot={png.resolve()}")
        return png
