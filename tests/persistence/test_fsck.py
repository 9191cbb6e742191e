"""lifeboatcache fsck: every kind of damage is counted, --fix repairs, exit codes say so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
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
    partial = paths[4].parent / f"{paths[4].name}.deadbeef-999999-0000.partial"
    partial.write_bytes(b"half")  # 1 partial: another host's, older than stale_partial_seconds
    os.utime(partial, (partial.stat().st_mtime - 7200,) * 2)
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


# A writer that holds its block as a .partial until told to finish (its rename waits on stdin):
# the moment fsck on a live tier must not take from it.
_HELD_WRITER = textwrap.dedent("""
    import os, sys
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.config import load_config_dict
    from lifeboatcache_core.keys import BlockKey

    real_replace = os.replace

    def replace(src, dst):
        if str(src).endswith(".partial") and ".lbk." in str(src):  # a block's, not NAMESPACE.json's or .layout's
            print("partial", src, flush=True)
            sys.stdin.readline()
        real_replace(src, dst)

    os.replace = replace
    cfg = {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": sys.argv[1]}],
           "fallback_local": {"enabled": False}}
    with TieredCache(load_config_dict(cfg), background_index=False) as cache:
        key = BlockKey("ns", bytes(range(32)))
        ok = cache.put([key], [b"x" * 5000]) == [True]
        buf = bytearray(5000)
        print("stored" if ok and cache.get([key], [buf]) == [True] and buf == b"x" * 5000 else "lost", flush=True)
""")


def _held_writer(tier: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", _HELD_WRITER, str(tier)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("partial "), f"the writer did not reach its rename: {line!r}"
    return proc, Path(line.split(" ", 1)[1].strip())


def test_fsck_fix_leaves_a_live_writers_partial(tmp_path: Path) -> None:
    """fsck --fix on a live tier: the partial file of a writer that is alive on this host stays,
    the writer finishes its block, and the block is whole."""
    tier = tmp_path / "tier"
    with open_cache(tmp_path) as cache:
        cache.put(keys(3), blobs(3, 1000))
    proc, partial = _held_writer(tier)
    try:
        assert _cli(str(tier), "--fix").returncode == 0  # an in-flight write is not a problem
        report = fsck(tier, fix=True)
        assert partial.exists(), "fsck --fix deleted a live writer's partial file"
        assert (report.in_flight, report.partial, report.ok) == (1, 0, 3)
        out, _ = proc.communicate("go\n", timeout=60)
        assert proc.returncode == 0 and out.strip() == "stored"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert fsck(tier).ok == 4


def test_fsck_fix_removes_a_dead_writers_partial(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    proc, partial = _held_writer(tier)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    report = fsck(tier, fix=True)
    assert (report.partial, report.in_flight, report.fixed["partial"]) == (1, 0, 1)
    assert not partial.exists()


def test_fsck_other_hosts_partial_by_age(tmp_path: Path) -> None:
    """Another host's pid means nothing here: its partial is in flight until stale_partial_seconds."""
    with open_cache(tmp_path) as cache:
        cache.put(keys(1), blobs(1, 100))
        final = Path(cache.tiers[0].backend.path_of(keys(1)[0]))
    fresh = final.parent / f"{'f' * 64}.lbk.0badc0de-1-0000.partial"
    fresh.write_bytes(b"in flight on another host")
    report = fsck(tmp_path / "tier", fix=True, stale_partial_seconds=600)
    assert fresh.exists() and (report.in_flight, report.partial) == (1, 0)
    os.utime(fresh, (fresh.stat().st_mtime - 601,) * 2)
    report = fsck(tmp_path / "tier", fix=True, stale_partial_seconds=600)
    assert not fresh.exists() and (report.in_flight, report.partial) == (0, 1)
