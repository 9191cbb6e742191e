"""The report's arithmetic, kept apart so its edge cases are tested on their own.

Percentiles use the nearest-rank definition: the P-th percentile of n sorted values is the
value at 1-based rank ceil(P/100 * n). It is always an observed value (P99 of 100 requests is
the 99th smallest, not an interpolation), which is what a latency SLO is checked against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not 0 < pct <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {pct}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = math.ceil(pct / 100 * len(ordered))
    return ordered[max(rank, 1) - 1]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def throughput(tokens: int, seconds: float) -> float:
    """Tokens per second; 0 when nothing ran."""
    return tokens / seconds if seconds > 0 else 0.0


def inter_token_latency(decode_s: float, output_tokens: int) -> float | None:
    """Mean gap between output tokens after the first: n tokens have n-1 gaps."""
    if output_tokens < 2:
        return None
    return decode_s / (output_tokens - 1)
