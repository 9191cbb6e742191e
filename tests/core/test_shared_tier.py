"""``shared = true`` tiers: blocks another process writes after this one indexed the tier are found."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import blobs, file_tier, keys, open_cache


@pytest.mark.parametrize("shared", [True, False])
def test_blocks_written_by_another_cache_after_start(tmp_path: Path, shared: bool) -> None:
    ks, data = keys(3), blobs(3, 4096)
    tier = file_tier(tmp_path / "t", shared=shared)
    with open_cache(tmp_path / "reader", tier) as reader, open_cache(tmp_path / "writer", tier) as writer:
        assert reader.wait_ready(30) and writer.wait_ready(30)
        assert writer.put(ks[:2], data[:2]) == [True, True]
        assert reader.contains_prefix(ks) == (2 if shared else 0)
        assert reader.exists(ks) == [shared, shared, False]
        out = [bytearray(4096) for _ in ks]
        assert reader.get(ks, out) == [shared, shared, False]
        if shared:
            assert [bytes(o) for o in out[:2]] == data[:2]
            assert reader.stats()["nvme"]["blocks"] == 2  # adopted into the index on first read
