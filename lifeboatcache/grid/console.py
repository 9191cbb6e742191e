"""A console whose tables stay readable in logs (CI, ``make demo | tee``), not only in terminals."""

from __future__ import annotations

import sys

from rich.console import Console

LOG_WIDTH = 240  # the grid table has 16 columns; rich's 80-column default for pipes squashes them


def wide_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else LOG_WIDTH)
