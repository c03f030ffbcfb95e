"""The offline HTML report of a run (``--npufuse-html``): one self-contained file, no network.

:mod:`.view` turns a :class:`~pytest_npufuse.report.case.CaseReport` into a plain, JSON-able case view (so
pytest-xdist workers can send it to the controller); :mod:`.timeline` draws a case's BASELINE and
VARIANT as SVG on one time axis; :mod:`.page` puts the summary table, the timelines and the time tables
into one page, and writes it atomically.
"""

from .page import render_page, write_html_report
from .view import case_view

__all__ = ["case_view", "render_page", "write_html_report"]
