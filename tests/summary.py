"""Lines a test adds to the end-of-run terminal summary (the power-loss tally, for one).

A test hands its lines over in its report's ``user_properties`` rather than in module state:
pytest-xdist runs tests in worker processes and carries only the reports to the process that
prints the summary. ``tests/conftest.py`` gathers and prints them, grouped by section.
"""

from __future__ import annotations

import pytest

#: the ``user_properties`` name; its value is (section title, line)
SUMMARY_PROPERTY = "terminal_summary_line"


def add_summary_line(request: pytest.FixtureRequest, section: str, line: str) -> None:
    """Print ``line`` under ``section`` at the end of the run, whether the test passes or fails."""
    request.node.user_properties.append((SUMMARY_PROPERTY, (section, line)))
