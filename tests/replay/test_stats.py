"""The report maths, with cases an off-by-one would fail."""

from __future__ import annotations

import math

import pytest

from lifeboatcache.replay import stats


def test_percentile_nearest_rank_on_one_to_hundred() -> None:
    values = list(range(100, 0, -1))  # unsorted on purpose
    assert stats.percentile(values, 50) == 50
    assert stats.percentile(values, 99) == 99
    assert stats.percentile(values, 100) == 100
    assert stats.percentile(values, 1) == 1


def test_percentile_small_samples_round_the_rank_up() -> None:
    ten = [float(v) for v in range(1, 11)]
    assert stats.percentile(ten, 50) == 5.0  # rank ceil(5.0) = 5
    assert stats.percentile(ten, 51) == 6.0  # rank ceil(5.1) = 6
    assert stats.percentile(ten, 99) == 10.0  # rank ceil(9.9) = 10
    assert stats.percentile(ten, 90) == 9.0  # rank exactly 9
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([3.0, 1.0], 50) == 1.0


def test_percentile_of_nothing_is_nan_and_bad_pct_raises() -> None:
    assert math.isnan(stats.percentile([], 50))
    with pytest.raises(ValueError, match="percentile"):
        stats.percentile([1.0], 0)
    with pytest.raises(ValueError, match="percentile"):
        stats.percentile([1.0], 101)


def test_throughput() -> None:
    assert stats.throughput(100, 4.0) == 25.0
    assert stats.throughput(100, 0.0) == 0.0


def test_inter_token_latency_counts_gaps_not_tokens() -> None:
    assert stats.inter_token_latency(0.9, 10) == pytest.approx(0.1)  # 10 tokens, 9 gaps
    assert stats.inter_token_latency(0.5, 1) is None
    assert stats.mean([1.0, 2.0, 6.0]) == 3.0
    assert math.isnan(stats.mean([]))
