"""Lines a test adds to the end-of-run terminal summary (the power-loss tally, for one).

A test hands its lines over in its report's ``user_properties`` rather than in module state:
pytest-xdist runs tests in worker processes and carries only the reports to the process that
prints the summary. ``tests/conftest.py``'s hooks hand the reports to :func:`gather` and the
terminal to :func:`print_lines`, which prints them grouped by section.
"""

from __future__ import annotations

from typing import Any

import pytest

#: the ``user_properties`` name; its value is (section title, line)
SUMMARY_PROPERTY = "terminal_summary_line"


def add_summary_line(request: pytest.FixtureRequest, section: str, line: str) -> None:
    """Print ``line`` under ``section`` at the end of the run, whether the test passes or fails."""
    request.node.user_properties.append((SUMMARY_PROPERTY, (section, line)))


_lines: dict[str, list[str]] = {}  # section -> lines, in the order the reports came in


def gather(report: pytest.TestReport) -> None:
    """Keep the lines a test's call report carries (from this process or an xdist worker)."""
    if report.when == "call":
        for name, value in report.user_properties:
            if name == SUMMARY_PROPERTY:
                section, line = value
                _lines.setdefault(str(section), []).append(str(line))


def print_lines(terminalreporter: Any) -> None:
    for section, lines in _lines.items():
        terminalreporter.write_sep("-", section)
        for line in lines:
            terminalreporter.write_line(line)
