"""CpuTierShadow follows vLLM's CPU-tier LRU: placement, request recency, displacement."""

from __future__ import annotations

import pytest
from lifeboatcache_vllm.cpu_shadow import CpuTierShadow


def test_placed_chunks_are_newest_and_a_request_refreshes_its_chain_head_newest() -> None:
    shadow: CpuTierShadow[str] = CpuTierShadow(4)
    assert shadow.place(["a0", "a1"], [0, 1]) == []
    assert shadow.place(["b0", "b1"], [2, 3]) == []
    assert shadow.coldest(2) == ["a0", "a1"]
    shadow.use(["a1", "a0"])  # tail first, as vLLM's policy refreshes a finished request
    assert shadow.coldest(4) == ["b0", "b1", "a1", "a0"]
    shadow.use(["unknown"])  # a chunk that never reached the CPU tier changes nothing
    assert len(shadow) == 4 and "b0" in shadow and shadow.row_of("a0") == 0


def test_a_reused_row_and_a_full_tier_displace_chunks() -> None:
    shadow: CpuTierShadow[str] = CpuTierShadow(3)
    shadow.place(["a", "b", "c"], [0, 1, 2])
    assert shadow.place(["d"], [1]) == ["b"]  # vLLM wrote d into b's row: b is gone
    assert shadow.place(["e"], [3]) == ["a"]  # a fourth chunk in a 3-row tier: the oldest is gone
    assert shadow.coldest(3) == ["c", "d", "e"] and shadow.row_of("b") is None
    assert shadow.place(["c"], [5]) == []  # promoted again into another row: moved, newest
    assert shadow.coldest(3) == ["d", "e", "c"] and shadow.row_of("c") == 5
    # c's old row is free (nothing displaced from it); four chunks in three rows: d, the oldest, goes
    assert shadow.place(["x"], [2]) == ["d"]


def test_rejects_an_empty_tier() -> None:
    with pytest.raises(ValueError):
        CpuTierShadow(0)
