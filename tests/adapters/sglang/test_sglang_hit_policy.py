"""The per-pool hit rules of SGLang's batch_exists_v2 (lifeboatcache_sglang.hit_policy), case by case.

The same rules run against SGLang's real pools in engine_checks/check_hicache_v2.py; these
cover the corner cases without the engine venv.
"""

from __future__ import annotations

import pytest
from lifeboatcache_sglang.hit_policy import PoolVerdict, all_pages, block_groups, fold, trailing_pages

T, F = True, False


def test_all_pages_is_the_leading_run_cut_at_the_kv_prefix() -> None:
    assert all_pages([T, T, F, T], 4) == PoolVerdict(2, frozenset({1, 2}))
    assert all_pages([T, T, T, T], 3) == PoolVerdict(3, frozenset({1, 2, 3}))
    assert all_pages([F, T], 2) == PoolVerdict(0, frozenset())
    assert all_pages([], 0) == PoolVerdict(0, frozenset())


def test_a_trailing_window_leaves_holes() -> None:
    """Window 2, pages 1-2 and 4-5 held: prefix 5 is restorable while 3 and 4 are not."""
    present = [T, T, F, T, T, F]
    assert trailing_pages(present, 6, 2) == PoolVerdict(5, frozenset({1, 2, 5}))
    # a window longer than the prefix needs every page before it
    assert trailing_pages([T, T, T], 3, 8) == PoolVerdict(3, frozenset({1, 2, 3}))
    # window 1 (Mamba state): exactly the pages whose state is stored
    assert trailing_pages([F, T, F, F, T], 5, 1) == PoolVerdict(5, frozenset({2, 5}))
    assert trailing_pages([F, T, F, F, T], 5, 0) == trailing_pages([F, T, F, F, T], 5, 1)


def test_block_groups_count_whole_leading_groups_and_never_gate() -> None:
    assert block_groups([T, T, T, F, T, T], block_pages=4, group_pages=2) == PoolVerdict(4, None)
    assert block_groups([T, T, T, T, T], block_pages=2, group_pages=2) == PoolVerdict(4, None)  # partial group: no
    assert block_groups([F, T], block_pages=0, group_pages=1) == PoolVerdict(0, None)
    assert block_groups([T, T, T], block_pages=0, group_pages=0) == PoolVerdict(3, None)


@pytest.mark.parametrize(("kv_pages", "verdicts", "expected"), [
    (6, [], [1, 2, 3, 4, 5, 6]),
    (6, [trailing_pages([T, T, F, T, T, F], 6, 2), trailing_pages([F, T, F, F, T, F], 6, 1)], [2, 5]),
    (6, [all_pages([T, T, T, F, T, T], 6), trailing_pages([T, T, F, T, T, T], 6, 2)], [1, 2]),
    (6, [block_groups([F], 1, 1)], [1, 2, 3, 4, 5, 6]),  # block groups never cut the KV hit
    (0, [all_pages([], 0)], []),
])
def test_fold_intersects_the_gating_pools(kv_pages: int, verdicts: list[PoolVerdict], expected: list[int]) -> None:
    assert fold(kv_pages, verdicts) == expected

