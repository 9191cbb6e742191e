"""``bench disk-fills``, small: every setting sees the same requests; compaction shows where the disk fills."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from lifeboatcache.bench.disk_fills import Setting


def test_disk_fills_cells_tell_the_settings_apart(tmp_path: Path, traces_dir: Path) -> None:
    # through the CLI, in a process of its own: the bench loads the model, which would stay in
    # pytest's memory (and libFuzzer's RSS check in test_fuzz counts the parent's peak)
    out = tmp_path / "disk-fills.json"
    proc = subprocess.run(
        [sys.executable, "-m", "lifeboatcache", "bench", "disk-fills", "--settings", "none,lossless,lossless@0.8",
         "--traces", str(traces_dir), "--limit", "6", "--requests", "40", "--concurrency", "4",
         "--capacity-fraction", "0.01", "--context", "64", "--path", str(tmp_path), "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    fills, never = (result["cells"][c]["settings"] for c in ("fills", "never_fills"))
    for cell in (fills, never):
        assert all(r["errors"] == 0 for r in cell.values())  # every byte read was the block's own
    # a disk that never fills: nothing evicted, the same hits everywhere, the fill setting never codes
    assert len({r["hit_rate"] for r in never.values()}) == 1 and never["none"]["hit_rate"] > 0.3
    assert all(r["evictions"] == 0 and r["declined"] == 0 for r in never.values())
    assert never["lossless@0.8"]["stored_per_raw_at_end"] > 0.99 and never["lossless@0.8"]["compacted"] == 0
    assert never["lossless"]["stored_per_raw_at_end"] < 0.8
    # a disk that fills: it ends full and turns stores away, and the fill setting ends up coded, its
    # raw blocks compacted. Turned away is evicted or declined: keep_prefixes declines a store rather
    # than evict a shallower block used within its idle limit (at least 5 s of wall clock), so how
    # many of the two are evictions depends on how fast the box replays (0 on a quick, idle one)
    none = fills["none"]
    held = none["blocks_at_end"] * none["stored_per_raw_at_end"] * result["block_bytes"]
    assert held > 0.9 * result["cells"]["fills"]["capacity_bytes"]
    assert none["evictions"] + none["declined"] > 0
    assert fills["lossless@0.8"]["compacted"] > 0 and fills["lossless@0.8"]["stored_per_raw_at_end"] < 0.8
    assert fills["lossless@0.8"]["blocks_at_end"] > fills["none"]["blocks_at_end"]
    assert not list(tmp_path.glob("lifeboat-disk-fills-*")), "the temporary tiers are removed"
    assert result["requests"] == 40 and result["machine"]["cpus"]


@pytest.mark.parametrize("text", ["", "@0.5", "lossless@x", "lossless@0", "lossless@1.5"])
def test_a_bad_setting_is_refused(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        Setting.parse(text)


def test_settings_parse() -> None:
    assert Setting.parse(" lossless@0.8 ") == Setting("lossless@0.8", "lossless", 0.8)
    assert Setting.parse("fp8") == Setting("fp8", "fp8", 0.0)
