"""Write probes, fallback and capacity against real small filesystems (tmpfs mounts)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from prometheus_client import generate_latest

from ..core.helpers import blobs, file_tier, keys, open_cache

MiB = 1024 * 1024


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_full_filesystem_at_open_is_skipped_with_fallback(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "1m") as mnt:
        with open(mnt / "filler", "wb") as fh:
            with contextlib.suppress(OSError):
                fh.write(b"\0" * (2 * MiB))
        with open_cache(tmp_path, file_tier(mnt)) as cache:
            health = {h["tier"]: h for h in cache.health()}
            assert not health["nvme"]["up"] and "No space left" in health["nvme"]["reason"]
            assert health["fallback"]["up"]
            assert cache.put(keys(2), blobs(2, 1000)) == [True, True]
            assert cache.get(keys(2), [bytearray(1000), bytearray(1000)]) == [True, True]


def _fill(mnt: Path) -> None:
    """Another writer takes every free byte of the filesystem."""
    with open(mnt / "filler", "wb") as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * MiB)
                fh.flush()


def test_a_tier_whose_disk_fills_stays_up_and_serves_what_it_holds(tmp_path: Path) -> None:
    """A bounded tier is full in its steady state: its probe must not turn every block it holds into a miss."""
    with tmpfs(tmp_path / "fills", "8m") as mnt:
        tier = file_tier(mnt, probe_seconds=0.2, manifest_url=f"sqlite:///{tmp_path / 'm.sqlite'}")
        with open_cache(tmp_path, tier) as cache:
            assert cache.put(keys(3), blobs(3, 100_000)) == [True] * 3
            _fill(mnt)
            time.sleep(0.6)  # three probe periods on a full filesystem
            cache.all_tiers[0].check()
            assert cache.all_tiers[0].up, cache.all_tiers[0].reason
            assert cache.get(keys(3), [bytearray(100_000) for _ in range(3)]) == [True] * 3
            cache.put(keys(1, start=9), blobs(1, 100_000))  # fits only by evicting; never raises
            assert cache.all_tiers[0].up and cache.all_tiers[0].stats.errors == 0
            held = [k for k in [*keys(3), *keys(1, start=9)] if k in cache.all_tiers[0].index]
            assert held  # eviction made room (for the manifest too), nothing was lost to errors
        # a restart on the full disk: the blocks on it are served again
        with open_cache(tmp_path, tier) as cache:
            assert cache.wait_ready(10) and cache.all_tiers[0].up, cache.all_tiers[0].reason
            assert cache.get(held, [bytearray(100_000) for _ in held]) == [True] * len(held)


def test_reserve_free_gb_is_honoured_on_a_real_filesystem(tmp_path: Path) -> None:
    reserve = 6 * MiB
    with tmpfs(tmp_path / "small", "24m") as mnt:
        tier = file_tier(mnt, capacity_gb=100, reserve_free_gb=reserve / 1024**3)
        with open_cache(tmp_path, tier) as cache:
            for i in range(60):  # 60 MiB through a 24 MiB filesystem
                assert cache.put(keys(1, start=i), blobs(1, MiB)) == [True]
                assert free_bytes(mnt) >= reserve - MiB - 8192, f"put {i}: reserve not kept"
            assert cache.tiers[0].stats.evictions > 30
            assert cache.exists(keys(1, start=59)) == [True]


def test_capacity_holds_at_three_times_under_concurrent_puts(tmp_path: Path) -> None:
    capacity = 8 * MiB
    with open_cache(tmp_path, file_tier(tmp_path / "t", capacity_gb=capacity / 1024**3, io_threads=8)) as cache:
        block = 256 * 1024
        for start in range(0, 96, 16):  # 24 MiB in batches of 16 concurrent puts
            assert all(cache.put(keys(16, start=start), blobs(16, block)))
            on_disk = sum(f.stat().st_size for f in (tmp_path / "t").rglob("*.lbk"))
            assert on_disk <= capacity + block + 8192, f"{on_disk} bytes on disk for a {capacity} capacity"


def _wait(predicate, timeout: float = 15.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_tier_goes_down_on_a_failed_probe_and_comes_back(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "flaky", "16m") as mnt:
        # the manifest lives elsewhere (manifest_url): an open database would keep the mount busy
        tier = file_tier(mnt, probe_seconds=0.5, reprobe_seconds=0.5, name="flaky",
                         manifest_url=f"sqlite:///{tmp_path / 'flaky-manifest.sqlite'}")
        config = load_config_dict({"tiers": [tier], "fallback_local": {"path": str(tmp_path / "fb"),
                                                                         "capacity_gb": 1}})
        cache = TieredCache(config)
        try:
            assert cache.wait_ready(10)
            assert cache.put(keys(1), blobs(1, 100)) == [True]
            remount(mnt, "ro")
            assert _wait(lambda: not cache.all_tiers[0].up), "a read-only remount must fail the periodic probe"
            assert "Read-only" in cache.health()[0]["reason"]
            assert 'lifeboatcache_tier_up{tier="flaky"} 0.0' in generate_latest().decode()
            assert cache.put(keys(1, start=5), blobs(1, 100)) in ([True], [False])  # never raises
            assert cache.get(keys(1), [bytearray(100)]) == [False]  # down tier: a miss, not an error
            remount(mnt, "rw")
            assert _wait(lambda: cache.all_tiers[0].up), "the tier must come back once its probe passes"
            assert cache.get(keys(1), [bytearray(100)]) == [True]
        finally:
            cache.close()
        assert (tmp_path / "flaky-manifest.sqlite").exists()


def test_consecutive_io_errors_mark_a_tier_unhealthy(tmp_path: Path) -> None:
    with open_cache(tmp_path, file_tier(tmp_path / "t", unhealthy_after=3)) as cache:
        tier = cache.tiers[0]
        cache.put(keys(5), blobs(5, 100))
        for k in keys(5):  # make every stored block unreadable (a directory where a file was)
            path = Path(tier.backend.path_of(k))
            path.unlink()
            path.mkdir()
        assert cache.get(keys(5), [bytearray(100) for _ in range(5)]) == [False] * 5
        assert not tier.up and "consecutive errors" in tier.reason
        assert tier.stats.errors >= 3
