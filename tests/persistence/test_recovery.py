"""Manifest and restart recovery: the files are the truth, the manifest only saves a scan."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

from lifeboatcache_backend_file.backend import MANIFEST_NAME

from ..core.helpers import blobs, file_tier, keys, open_cache


def manifest_rows(tier_dir: Path) -> dict[bytes, tuple[int, int, str, int]]:
    with sqlite3.connect(tier_dir / MANIFEST_NAME) as db:
        return {d: (size, stored, codec, hits) for d, size, stored, codec, hits in
                db.execute("SELECT digest, size, stored_size, codec, hits FROM lifeboat_blocks")}


def test_manifest_rows_follow_puts_hits_and_evictions(tmp_path: Path) -> None:
    tier = tmp_path / "t"
    ks, data = keys(10), blobs(10, 30_000)
    with open_cache(tmp_path, file_tier(tier, capacity_gb=6 * 40_000 / 1024**3)) as cache:
        cache.put(ks, data)
        kept = [k for k in ks if k in cache.tiers[0].index]
        assert cache.get(kept[:3], [bytearray(30_000) for _ in range(3)]) == [True] * 3
        cache.tiers[0].manifest.flush()
        rows = manifest_rows(tier)
        indexed = set(cache.tiers[0].index)
    assert {k.digest for k in indexed} == set(rows), "one row per stored block, none for evicted ones"
    assert len(rows) < 10  # the capacity evicted some
    for k in kept[:3]:
        size, stored, codec, hits = rows[k.digest]
        assert size == 30_000 and stored > 30_000 and codec == "none@1" and hits == 1


def test_restart_indexes_from_the_manifest(tmp_path: Path) -> None:
    ks, data = keys(50), blobs(50, 5000)
    with open_cache(tmp_path) as cache:
        cache.put(ks, data)
    with open_cache(tmp_path) as cache:
        progress = cache.tiers[0].recovery
        assert progress.phase == "done"
        assert progress.manifest_rows == 50 and progress.added_from_files == 0 and progress.missing_files == 0
        out = [bytearray(5000) for _ in ks]
        assert cache.get(ks, out) == [True] * 50 and [bytes(o) for o in out] == data


def test_deleted_manifest_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    ks, data = keys(20), blobs(20, 3000)
    with open_cache(tmp_path) as cache:
        cache.put(ks, data)
    (tmp_path / "tier" / MANIFEST_NAME).unlink()
    with open_cache(tmp_path) as cache:
        assert cache.tiers[0].recovery.added_from_files == 20
        out = [bytearray(3000) for _ in ks]
        assert cache.get(ks, out) == [True] * 20 and [bytes(o) for o in out] == data
        cache.tiers[0].manifest.flush()
    assert len(manifest_rows(tmp_path / "tier")) == 20


def test_corrupt_manifest_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    ks, data = keys(20), blobs(20, 3000)
    with open_cache(tmp_path) as cache:
        cache.put(ks, data)
    manifest = tmp_path / "tier" / MANIFEST_NAME
    for extra in ("-wal", "-shm"):
        Path(f"{manifest}{extra}").unlink(missing_ok=True)
    manifest.write_bytes(b"this is not a database" * 500)
    with open_cache(tmp_path) as cache:
        out = [bytearray(3000) for _ in ks]
        assert cache.get(ks, out) == [True] * 20 and [bytes(o) for o in out] == data
        assert cache.tiers[0].recovery.added_from_files == 20
        cache.tiers[0].manifest.flush()
    assert list((tmp_path / "tier").glob(f"{MANIFEST_NAME}.corrupt-*")), "the damaged manifest is kept aside"
    assert len(manifest_rows(tmp_path / "tier")) == 20


def test_stale_manifest_files_added_and_removed_behind_its_back(tmp_path: Path) -> None:
    ks, data = keys(30), blobs(30, 2000)
    with open_cache(tmp_path) as cache:
        cache.put(ks[:20], data[:20])
        removed = [Path(cache.tiers[0].backend.path_of(k)) for k in ks[:5]]
    with open_cache(tmp_path / "other", file_tier(tmp_path / "other")) as other:
        other.put(ks[20:], data[20:])
        added = [Path(other.tiers[0].backend.path_of(k)) for k in ks[20:]]
    for path in removed:
        path.unlink()
    for path in added:  # copy another node's block files in, behind the manifest's back
        dest = tmp_path / "tier" / path.relative_to(tmp_path / "other")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
    with open_cache(tmp_path) as cache:
        progress = cache.tiers[0].recovery
        assert progress.missing_files == 5 and progress.added_from_files == 10
        out = [bytearray(2000) for _ in ks]
        assert cache.get(ks, out) == [False] * 5 + [True] * 25
        assert [bytes(o) for o in out[5:]] == data[5:]


def test_serves_before_the_index_is_complete(tmp_path: Path) -> None:
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.config import load_config_dict

    ks, data = keys(200), blobs(200, 1000)
    with open_cache(tmp_path) as cache:
        cache.put(ks, data)
    config = load_config_dict({"tiers": [file_tier(tmp_path / "tier")], "fallback_local": {"enabled": False}})
    cache = TieredCache(config)  # background recovery
    try:
        dest = bytearray(1000)
        assert cache.get([ks[-1]], [dest]) == [True] and bytes(dest) == data[-1]
        assert cache.wait_ready(30)
        assert len(cache.tiers[0].index) == 200
    finally:
        cache.close()


def test_recovery_progress_in_health(tmp_path: Path) -> None:
    with open_cache(tmp_path) as cache:
        cache.put(keys(3), blobs(3, 100))
    with open_cache(tmp_path) as cache:
        recovery = cache.health()[0]["recovery"]
        assert recovery["phase"] == "done" and recovery["manifest_rows"] == 3 and recovery["seconds"] >= 0
        assert time.monotonic() > 0
