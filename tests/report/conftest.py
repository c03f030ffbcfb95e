"""The headless browser the report tests render pages in."""

import pytest
from browser import Chromium, find_chromium


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    executable = find_chromium()
    if executable is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium; .ci/run installs it when absent)")
    return Chromium(executable)
