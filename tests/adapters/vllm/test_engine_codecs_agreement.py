"""``bench engine-codecs``'s agreement figures and merging, without an engine (fast)."""

from __future__ import annotations

import pytest

from lifeboatcache.bench.engine_codecs import agreement, summarize


def test_agreement_counts_positions_whole_outputs_first_tokens_and_common_prefixes() -> None:
    base = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    got = [[1, 2, 3, 4], [5, 0, 7, 8], [0, 10, 11, 12]]
    figures = agreement(got, base)
    assert figures["token_agreement"] == pytest.approx(10 / 12)
    assert figures["identical_outputs"] == pytest.approx(1 / 3)
    assert figures["first_token_agreement"] == pytest.approx(2 / 3)
    assert figures["mean_common_prefix"] == pytest.approx((4 + 1 + 0) / 3)


def test_agreement_refuses_outputs_of_other_prompts() -> None:
    with pytest.raises(ValueError):
        agreement([[1]], [[1], [2]])
    with pytest.raises(ValueError):
        agreement([[1, 2]], [[1]])  # another gen_tokens


def test_summarize_compares_every_run_with_the_none_run() -> None:
    runs = [{"codec": "fp8", "tokens": [[1, 0]]}, {"codec": "none", "tokens": [[1, 2]]}]
    out = {r["codec"]: r for r in summarize(runs)}
    assert out["fp8"]["token_agreement"] == 0.5 and out["none"]["token_agreement"] == 1.0
    alone = summarize([{"codec": "fp8", "tokens": [[1, 0]]}])[0]
    assert alone["token_agreement"] is None and alone["mean_common_prefix"] is None
