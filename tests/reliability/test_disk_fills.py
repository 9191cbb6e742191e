"""``bench disk-fills``, small: every setting sees the same requests; compaction shows where the disk fills."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from lifeboatcache.bench.disk_fills import Setting, run


def test_disk_fills_cells_tell_the_settings_apart(tmp_path: Path, traces_dir: Path) -> None:
    settings = [Setting.parse(s) for s in ("none", "lossless", "lossless@0.8")]
    result = run(settings=settings, traces=traces_dir, limit=6, requests=40, concurrency=4,
                 capacity_fraction=0.01, room=1.5, context=64, seed=0, path=tmp_path)
    fills, never = (result["cells"][c]["settings"] for c in ("fills", "never_fills"))
    for cell in (fills, never):
        assert all(r["errors"] == 0 for r in cell.values())  # every byte read was the block's own
    # a disk that never fills: nothing evicted, the same hits everywhere, the fill setting never codes
    assert len({r["hit_rate"] for r in never.values()}) == 1 and never["none"]["hit_rate"] > 0.3
    assert all(r["evictions"] == 0 for r in never.values())
    assert never["lossless@0.8"]["stored_per_raw_at_end"] > 0.99 and never["lossless@0.8"]["compacted"] == 0
    assert never["lossless"]["stored_per_raw_at_end"] < 0.8
    # a disk that fills: eviction runs, and the fill setting ends up coded, its raw blocks compacted
    assert fills["none"]["evictions"] > 0
    assert fills["lossless@0.8"]["compacted"] > 0 and fills["lossless@0.8"]["stored_per_raw_at_end"] < 0.8
    assert fills["lossless@0.8"]["blocks_at_end"] > fills["none"]["blocks_at_end"]
    assert not list(tmp_path.glob("lifeboat-disk-fills-*")), "the temporary tiers are removed"


@pytest.mark.parametrize("text", ["", "@0.5", "lossless@x", "lossless@0", "lossless@1.5"])
def test_a_bad_setting_is_refused(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        Setting.parse(text)


def test_settings_parse() -> None:
    assert Setting.parse(" lossless@0.8 ") == Setting("lossless@0.8", "lossless", 0.8)
    assert Setting.parse("fp8") == Setting("fp8", "fp8", 0.0)
