"""Fault matrix: every fault a tier meets in production, injected for real, with one set of rules.

For each fault: the engine-facing API keeps answering (misses, never an exception or a hang),
no call ever serves wrong bytes, health and metrics say what happened, and the tier serves
again once the fault clears. Faults come from real mechanisms (tmpfs mounts, remounts,
``rm -r``, a TCP proxy in front of moto's S3 server, a second process holding the manifest's
lock or writing the same keys) or from a fault-injecting wrapper backend registered as a
plugin (EIO); the code under test is never patched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.plugins import register_plugin
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.backends.backend_faultproxy import FaultProxy
from tests.backends.backend_servers import MotoServer
from tests.backends.conftest import AWS_TEST_ENV
from tests.core.helpers import blobs, keys
from tests.reliability.fault_backend import NAME as FAULTY
from tests.reliability.fault_backend import FaultPlugin

BLOCK = 16 * 1024
WARM = 8
FAST = {"unhealthy_after": 2, "probe_seconds": 0.3, "reprobe_seconds": 0.3}


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def scraped(tier: str, sample: str) -> float | None:
    """One sample of this process's Prometheus scrape (what an operator's dashboard sees)."""
    for family in text_string_to_metric_families(generate_latest().decode()):
        for s in family.samples:
            if s.name == f"lifeboatcache_{sample}" and s.labels.get("tier") == tier:
                return s.value
    return None


def tier_health(cache: TieredCache, name: str) -> dict[str, Any]:
    return next(h for h in cache.health() if h["tier"] == name)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def stop_child(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


class Fault:
    """One row of the matrix. ``open`` builds the cache, ``inject`` breaks it (it may return a
    restarted cache), ``observed`` says whether health/metrics show the fault, ``clear`` ends it."""

    tier = "nvme"
    #: the scraped sample that shows this fault and a test of its value (None: health only)
    metric: tuple[str, Callable[[float], bool]] | None = None

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.tmp = tmp_path
        self.request = request
        self.stack = contextlib.ExitStack()

    def tier_config(self) -> dict[str, Any]:
        return {"name": self.tier, "backend": "file", "capacity_gb": 1, "path": str(self.tmp / "tier"), **FAST}

    def open(self) -> TieredCache:
        config = load_config_dict({"tiers": [self.tier_config()],
                                   "fallback_local": {"path": str(self.tmp / "fallback"), "capacity_gb": 1}})
        return TieredCache(config, background_index=False)

    def inject(self, cache: TieredCache) -> TieredCache | None:
        raise NotImplementedError

    def observed(self, cache: TieredCache) -> bool:
        raise NotImplementedError

    def clear(self, cache: TieredCache) -> None:
        """Nothing to undo by default: the fault was one-off damage the tier has set aside."""

    def recovered(self, cache: TieredCache) -> bool:
        """Extra checks once the tier serves again (beyond the common put/get round trip)."""
        return True

    def tier_down_because(self, cache: TieredCache, *words: str) -> bool:
        health = tier_health(cache, self.tier)
        return not health["up"] and all(w in health["reason"] for w in words)


class DiskFull(Fault):
    """A real small filesystem (tmpfs) filled up by someone else."""

    metric = ("evictions_total", lambda v: v >= 1)

    def tier_config(self) -> dict[str, Any]:
        self.mnt = self.stack.enter_context(tmpfs(self.tmp / "small", "4m"))
        return {**super().tier_config(), "path": str(self.mnt), "manifest_url": f"sqlite:///{self.tmp / 'm.sqlite'}"}

    def inject(self, cache: TieredCache) -> None:
        with open(self.mnt / "filler", "wb") as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()

    def observed(self, cache: TieredCache) -> bool:
        # the tier gives up its own blocks to keep writing (evictions), or is skipped when it cannot
        stats = cache.stats()[self.tier]
        return self.tier_down_because(cache, "No space left") or (stats["evictions"] >= 1 and stats["blocks"] < WARM)

    def clear(self, cache: TieredCache) -> None:
        (self.mnt / "filler").unlink()


class EIO(Fault):
    """A dying disk: every call of the wrapper backend fails with EIO."""

    metric = ("errors_total", lambda v: v >= FAST["unhealthy_after"])

    def tier_config(self) -> dict[str, Any]:
        register_plugin(FaultPlugin(), "fault-injection")
        return {**super().tier_config(), "backend": FAULTY}

    def inject(self, cache: TieredCache) -> None:
        cache.all_tiers[0].backend.fault = "eio"

    def observed(self, cache: TieredCache) -> bool:
        return (self.tier_down_because(cache, "Input/output error")
                and cache.stats()[self.tier]["errors"] >= FAST["unhealthy_after"])

    def clear(self, cache: TieredCache) -> None:
        cache.all_tiers[0].backend.fault = None


class ShortReads(Fault):
    """Block files cut short on disk (a torn copy, a filesystem that lost its tail)."""

    metric = ("corrupt_blocks_total", lambda v: v >= 1)

    def inject(self, cache: TieredCache) -> None:
        for path in (self.tmp / "tier").rglob("*.lbk"):
            size = path.stat().st_size
            os.truncate(path, size // 2)

    def observed(self, cache: TieredCache) -> bool:
        return cache.stats()[self.tier]["corrupt_blocks"] >= 1 and tier_health(cache, self.tier)["up"]

    def recovered(self, cache: TieredCache) -> bool:
        return any((self.tmp / "tier" / ".bad").rglob("*.lbk"))


class ReadOnlyRemount(Fault):
    """``mount -o remount,ro`` under a running tier (what the kernel does after a disk error)."""

    metric = ("tier_up", lambda v: v == 0)

    def tier_config(self) -> dict[str, Any]:
        self.mnt = self.stack.enter_context(tmpfs(self.tmp / "ro", "16m"))
        # the manifest lives elsewhere: an open database would keep the mount busy
        return {**super().tier_config(), "path": str(self.mnt), "manifest_url": f"sqlite:///{self.tmp / 'm.sqlite'}"}

    def inject(self, cache: TieredCache) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.mnt)], check=True)

    def observed(self, cache: TieredCache) -> bool:
        return self.tier_down_because(cache, "Read-only")

    def clear(self, cache: TieredCache) -> None:
        subprocess.run(["mount", "-o", "remount,rw", str(self.mnt)], check=True)


class DirectoryDeleted(Fault):
    """``rm -r`` of the tier's directory (manifest included) under a running cache."""

    metric = ("misses_total", lambda v: v >= 1)

    def inject(self, cache: TieredCache) -> None:
        shutil.rmtree(self.tmp / "tier")

    def observed(self, cache: TieredCache) -> bool:
        stats = cache.stats()[self.tier]
        return stats["blocks"] < WARM and stats["misses"] >= 1

    def recovered(self, cache: TieredCache) -> bool:
        return any((self.tmp / "tier").rglob("*.lbk"))


class S3Fault(Fault):
    """S3 answering 5xx, cutting connections or not answering, through a proxy in front of moto."""

    metric = ("tier_up", lambda v: v == 0)

    tier = "s3"
    mode = "http500"

    def tier_config(self) -> dict[str, Any]:
        moto: MotoServer = self.request.getfixturevalue("moto_server")
        mp = self.stack.enter_context(pytest.MonkeyPatch.context())
        for name, value in AWS_TEST_ENV.items():
            mp.setenv(name, value)
        mp.setenv("AWS_CONFIG_FILE", str(self.tmp / "no-aws-config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(self.tmp / "no-aws-credentials"))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("XDG_CACHE_HOME", str(self.tmp / "xdg"))
        import boto3

        bucket = f"fault-{self.mode}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        self.proxy = FaultProxy(moto.port).start()
        self.stack.callback(self.proxy.stop)
        self.endpoint = f"http://127.0.0.1:{self.proxy.port}"
        return {"name": self.tier, "backend": "s3", "capacity_gb": 1, **FAST, "url": f"s3://{bucket}/kv",
                "endpoint_url": self.endpoint, "region": "us-east-1", "max_attempts": 2,
                "connect_timeout_s": 1.0, "read_timeout_s": 0.5}

    def inject(self, cache: TieredCache) -> None:
        self.proxy.set(self.mode, delay=2.0)

    def observed(self, cache: TieredCache) -> bool:
        return self.tier_down_because(cache, self.endpoint)

    def clear(self, cache: TieredCache) -> None:
        self.proxy.set("pass")


class S3ServerError(S3Fault):
    mode = "http500"


class S3Reset(S3Fault):
    mode = "reset"


class S3Timeout(S3Fault):
    mode = "slow"


class ManifestLocked(Fault):
    """Another process holds the manifest database's write lock (a stuck fsck, a backup tool)."""

    def inject(self, cache: TieredCache) -> None:
        manifest = self.tmp / "tier" / "manifest.sqlite"
        assert cache.all_tiers[0].manifest is not None and cache.all_tiers[0].manifest.flush(30)
        code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(600)")
        self.locker = subprocess.Popen([sys.executable, "-c", code, str(manifest)], stdout=subprocess.PIPE, text=True)
        self.stack.callback(stop_child, self.locker)
        assert self.locker.stdout is not None and self.locker.stdout.readline().strip() == "locked"

    def observed(self, cache: TieredCache) -> bool:
        return tier_health(cache, self.tier)["manifest_write_errors"] >= 1

    def clear(self, cache: TieredCache) -> None:
        stop_child(self.locker)

    def recovered(self, cache: TieredCache) -> bool:
        tier = cache.all_tiers[0]
        assert tier.manifest is not None
        return tier.manifest.flush(30) and tier.manifest.count() == len(tier.index)


class ManifestCorrupt(Fault):
    """The manifest database is garbage at restart: it is set aside and the files rebuild the index."""

    metric = ("recovery_added_from_files", lambda v: v == WARM)

    def inject(self, cache: TieredCache) -> TieredCache:
        cache.close()
        manifest = self.tmp / "tier" / "manifest.sqlite"
        for suffix in ("-wal", "-shm"):
            Path(f"{manifest}{suffix}").unlink(missing_ok=True)
        manifest.write_bytes(b"SQLite format 3\0" + os.urandom(8192))
        restarted = self.open()
        assert restarted.wait_ready(30)
        return restarted

    def observed(self, cache: TieredCache) -> bool:
        set_aside = list((self.tmp / "tier").glob("manifest.sqlite.corrupt-*"))
        return bool(set_aside) and tier_health(cache, self.tier)["recovery"]["added_from_files"] == WARM

    def recovered(self, cache: TieredCache) -> bool:
        return cache.get(keys(WARM), [bytearray(BLOCK) for _ in range(WARM)]) == [True] * WARM


SECOND_WRITER = """
import sys, time
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from tests.core.helpers import keys
path, seconds, block = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
cfg = load_config_dict({"tiers": [{"name": "nvme", "backend": "file", "path": path,
                                   "capacity_gb": 24 * block / 1024**3}],
                        "fallback_local": {"enabled": False}})
data = [bytes([i % 251]) * block for i in range(64)]
with TieredCache(cfg, background_index=False) as cache:
    print("writing", flush=True)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        # the same keys with the same bytes (content addressing), plus its own keys so it evicts
        assert all(cache.put(keys(8), data[:8]))
        assert all(cache.put(keys(8, start=500 + 8 * (n % 6)), data[8:16]))
        n += 1
print("done", n, flush=True)
"""


def warm_data() -> list[bytes]:
    return [bytes([i % 251]) * BLOCK for i in range(WARM)]


class SecondWriter(Fault):
    """Another process writes the same keys into the same directory (and evicts, with a small capacity)."""

    metric = ("corrupt_blocks_total", lambda v: v == 0)

    def inject(self, cache: TieredCache) -> None:
        repo = Path(__file__).resolve().parents[2]
        self.writer = subprocess.Popen(
            [sys.executable, "-c", SECOND_WRITER, str(self.tmp / "tier"), "4", str(BLOCK)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=repo,
            env={**os.environ, "PYTHONPATH": str(repo)},
        )
        self.stack.callback(stop_child, self.writer)
        assert self.writer.stdout is not None and self.writer.stdout.readline().strip() == "writing"

    def observed(self, cache: TieredCache) -> bool:
        stats = cache.stats()[self.tier]
        return (self.writer.poll() == 0 and stats["corrupt_blocks"] == 0 and stats["errors"] == 0
                and tier_health(cache, self.tier)["up"])

    def clear(self, cache: TieredCache) -> None:
        _out, err = self.writer.communicate(timeout=60)
        assert self.writer.returncode == 0, err


FAULTS = [DiskFull, EIO, ShortReads, ReadOnlyRemount, DirectoryDeleted, S3ServerError, S3Reset, S3Timeout,
          ManifestLocked, ManifestCorrupt, SecondWriter]


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def assert_answers_without_wrong_bytes(cache: TieredCache, ks: list, data: list[bytes], rounds: int = 3) -> None:
    """The engine-facing calls return in bounded time, and whatever they serve is right."""
    for r in range(rounds):
        bufs = [bytearray(BLOCK) for _ in ks]
        started = time.monotonic()
        found = cache.get(ks, bufs)
        assert len(found) == len(ks)
        for hit, buf, want in zip(found, bufs, data, strict=True):
            assert not hit or bytes(buf) == want, "a hit served wrong bytes"
        assert isinstance(cache.contains_prefix(ks), int)
        assert cache.exists(ks[:1]) in ([True], [False])
        stored = cache.put(keys(2, start=100 + 2 * r), [b"\x01" * BLOCK, b"\x02" * BLOCK])
        assert stored in ([True, True], [True, False], [False, True], [False, False])
        assert time.monotonic() - started < 60, "the API must answer while the tier is failing"


@pytest.mark.parametrize("fault_cls", FAULTS, ids=[f.__name__ for f in FAULTS])
def test_fault(fault_cls: type[Fault], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    fault = fault_cls(tmp_path, request)
    with fault.stack:
        cache = fault.open()
        try:
            ks, data = keys(WARM), warm_data()
            assert all(cache.put(ks, data)), cache.health()
            cache = fault.inject(cache) or cache
            assert_answers_without_wrong_bytes(cache, ks, data)
            assert wait_for(lambda: fault.observed(cache)), (
                f"health/metrics do not show {fault_cls.__name__}: {tier_health(cache, fault.tier)} "
                f"{cache.stats()[fault.tier]}")
            if fault.metric is not None:
                name, ok = fault.metric
                value = scraped(fault.tier, name)
                assert value is not None and ok(value), f"lifeboatcache_{name}{{tier={fault.tier!r}}} = {value}"
            fault.clear(cache)
            fresh, fresh_data = keys(4, start=1000), blobs(4, BLOCK)
            assert wait_for(lambda: tier_health(cache, fault.tier)["up"] and all(cache.put(fresh, fresh_data))), (
                f"{fault.tier} did not recover: {tier_health(cache, fault.tier)}")
            tier = next(t for t in cache.all_tiers if t.name == fault.tier)
            assert all(k in tier.index for k in fresh), "the fresh blocks went to the recovered tier"
            bufs = [bytearray(BLOCK) for _ in fresh]
            assert cache.get(fresh, bufs) == [True] * 4 and [bytes(b) for b in bufs] == fresh_data
            assert fault.recovered(cache)
            assert_answers_without_wrong_bytes(cache, ks, data, rounds=1)
        finally:
            cache.close()


def test_fault_backend_reports_eio_like_the_kernel(tmp_path: Path) -> None:
    """The injector itself: EIO with the errno and the path, like a real failing read."""
    from lifeboatcache_backend_file.backend import FileConfig

    from tests.reliability.fault_backend import FaultyFileBackend

    backend = FaultyFileBackend(FileConfig(path=tmp_path), tier="t")
    backend.probe()
    backend.fault = "eio"
    with pytest.raises(OSError) as info:
        backend.probe()
    assert info.value.errno == errno.EIO and str(tmp_path) in str(info.value)
