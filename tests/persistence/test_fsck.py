"""lifeboatcache fsck: every kind of damage is counted, --fix repairs, exit codes say so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lifeboatcache.fsck import fsck

from ..core.helpers import blobs, file_tier, keys, open_cache


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lifeboatcache", "fsck", *args], capture_output=True, text=True,
                          timeout=120)


def damaged_tier(tmp_path: Path) -> Path:
    tier = tmp_path / "tier"
    ks = keys(12)
    with open_cache(tmp_path) as cache:
        cache.put(ks[:10], blobs(10, 4000))
        paths = [Path(cache.tiers[0].backend.path_of(k)) for k in ks]
    with open_cache(tmp_path / "o", file_tier(tmp_path / "o")) as other:  # blocks the manifest never saw
        other.put(ks[10:], blobs(2, 4000))
        other_paths = [Path(other.tiers[0].backend.path_of(k)) for k in ks[10:]]
    for src, dest in zip(other_paths, paths[10:], strict=True):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)  # 2 orphans
    raw = bytearray(paths[0].read_bytes())
    raw[len(raw) // 2] ^= 1
    paths[0].write_bytes(raw)  # 1 corrupt
    shutil.copy(paths[2], paths[1])  # 1 foreign: a valid block of another key at this path
    paths[3].unlink()  # 1 missing
    (paths[4].parent / f"{paths[4].name}.deadbeef-999999-0000.partial").write_bytes(b"half")  # 1 partial
    return tier


def test_fsck_counts_every_kind(tmp_path: Path) -> None:
    report = fsck(damaged_tier(tmp_path))
    assert (report.ok, report.corrupt, report.foreign, report.orphan, report.missing, report.partial) == \
        (9, 1, 1, 2, 1, 1)
    assert report.problems_left == 6


def test_fsck_fix_then_clean(tmp_path: Path) -> None:
    tier = damaged_tier(tmp_path)
    fixed = fsck(tier, fix=True)
    assert fixed.problems_left == 0
    again = fsck(tier)
    assert again.problems == 0 and again.ok == 9
    assert len(list((tier / ".bad").rglob("*.lbk"))) == 2
    with open_cache(tmp_path) as cache:  # the repaired tier serves its 9 good blocks
        assert sum(cache.exists(keys(12))) == 9


def test_fsck_cli_json_and_exit_codes(tmp_path: Path) -> None:
    tier = damaged_tier(tmp_path)
    result = _cli(str(tier), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["corrupt"] == 1 and data["orphan"] == 2 and data["problems_left"] == 6
    assert _cli(str(tier), "--fix").returncode == 0
    assert _cli(str(tier)).returncode == 0
    assert _cli(str(tmp_path / "nope")).returncode == 2


def test_fsck_healthy_tier(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(5), blobs(5, 100))
    report = fsck(tmp_path / "tier")
    assert report.ok == 5 and report.problems == 0 and os.path.exists(tmp_path / "tier" / "manifest.sqlite")
