"""The README is the one-screen start, and CI runs exactly the commands it gives a newcomer."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _bash_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_setup_and_test_are_two_commands_that_ci_runs_word_for_word():
    install, test = _bash_blocks(_section("Set up and test"))
    assert install.startswith("pip install ") and '"torch==2.13.0"' in install and ".[test]" in install
    assert test.startswith("python -m pytest")
    # A command line of .ci/run, without the "|| exit 1" that stops CI on a failed install.
    ci = [line.split(" || ")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert install in ci and test in ci
    assert ci.index(install) < ci.index(test)


def test_readme_is_one_screen_that_points_to_the_docs():
    assert len(README.splitlines()) <= 150
    links = re.findall(r"\]\((docs/[^)#]+)", README)
    assert "docs/index.md" in links and all((ROOT / link).is_file() for link in links)
