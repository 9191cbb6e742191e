"""NFS backend on a local path with fault injection.

No NFS client exists on the test machines (the kernel has no nfs filesystem and there is no
FUSE client; see shared/reference/test-environment.md), so an export cannot be mounted here:
the NFS-specific behaviour (errno handling, suspension, deadlines, mount checks, writers on
several hosts) is exercised on a local directory with the failures injected.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test
from lifeboatcache_backend_nfs.backend import NFSBackend, NFSConfig, mount_of
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import BlockMeta, decode_block
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.errors import TierUnavailableError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing import (
    BackendContract,
    CorruptionContract,
    RecoveryContract,
    RecoveryHelperContract,
    backend_state_machine,
)
from lifeboatcache_core.testing.contracts import RecordingSink, key


def make_nfs(where: Path, **options: Any) -> NFSBackend:
    root = where / "export"
    root.mkdir(parents=True, exist_ok=True)
    return NFSBackend(NFSConfig(path=root, require_nfs_mount=False, **options), tier="nfs")


def put(backend: NFSBackend, k: BlockKey, data: bytes) -> int:
    return backend.put(k, [data], BlockMeta.new(k, len(data)))


class _Damage:
    def damage(self, backend: NFSBackend, k: BlockKey, mutate: Callable[[bytes], bytes]) -> None:
        path = Path(backend.path_of(k))
        path.write_bytes(mutate(path.read_bytes()))


class TestNFSContract(_Damage, RecoveryHelperContract, BackendContract, CorruptionContract):
    def make_backend(self, tmp_path: Path) -> NFSBackend:
        return make_nfs(tmp_path)


class TestNFSRecovery(RecoveryContract):
    def tier_options(self, tmp_path: Path) -> dict[str, object]:
        (tmp_path / "export").mkdir(exist_ok=True)
        return {"backend": "nfs", "path": str(tmp_path / "export"), "require_nfs_mount": False}


class TestNFSContractWithDeadlines(_Damage, BackendContract, CorruptionContract):
    def make_backend(self, tmp_path: Path) -> NFSBackend:
        return make_nfs(tmp_path, op_timeout_s=10.0)


def test_nfs_state_machine() -> None:
    machine = backend_state_machine(lambda d: make_nfs(d), max_examples=10, stateful_step_count=15)
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


def test_missing_mount_point_is_a_reason_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "mnt" / "export"
    with pytest.raises(TierUnavailableError, match="does not exist: is the NFS export mounted there"):
        NFSBackend(NFSConfig(path=path), tier="nfs")
    assert not path.exists()


def test_a_local_path_is_refused_unless_allowed(tmp_path: Path) -> None:
    point, fstype = mount_of(tmp_path)
    assert fstype not in ("nfs", "nfs4")
    with pytest.raises(TierUnavailableError) as info:
        NFSBackend(NFSConfig(path=tmp_path), tier="nfs")
    assert f"is on {fstype} (mount point {point}), not NFS" in str(info.value)


def _read_by(backend: NFSBackend, how: str, k: BlockKey, dest: memoryview | None = None) -> bytes:
    """The payload of ``k`` through ``read`` (into ``dest``) or a coding tier's ``read_payload``."""
    if how == "read":
        return bytes(backend.read(k, dest)[1])
    sink = _DecodingSink(dest)
    backend.read_payload(k, sink)
    return sink.payload


class _DecodingSink(RecordingSink):
    """Writes the payload into the caller's buffer when handed it, as a tier's decoder does."""

    def __init__(self, dest: memoryview | None) -> None:
        super().__init__()
        self.dest = dest

    def end(self, payload: memoryview) -> None:
        super().end(payload)
        if self.dest is not None:
            self.dest[:] = payload


@pytest.mark.parametrize("how", ["read", "read_payload"])
def test_stale_handle_is_a_miss_then_fails_fast_until_a_probe_passes(tmp_path: Path, how: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_nfs(tmp_path)
    put(backend, key(1), b"x" * 1000)
    real_preadv = os.preadv
    calls = []

    def stale(fd: int, buffers: Any, offset: int, *a: Any) -> int:
        calls.append(fd)
        raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))

    monkeypatch.setattr(os, "preadv", stale)
    with pytest.raises(OSError) as first:
        _read_by(backend, how, key(1))
    assert first.value.errno == errno.ESTALE
    with pytest.raises(OSError, match="suspended until the next probe passes"):
        _read_by(backend, how, key(1))  # fails fast: nothing touches the sick mount
    assert len(calls) == 1
    monkeypatch.setattr(os, "preadv", real_preadv)
    backend.probe()
    assert _read_by(backend, how, key(1)) == b"x" * 1000


@pytest.mark.parametrize("how", ["read", "read_payload"])
def test_hung_operation_times_out_and_never_writes_the_callers_buffer_late(tmp_path: Path, how: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_nfs(tmp_path, op_timeout_s=0.3)
    put(backend, key(1), b"y" * 4096)
    release = threading.Event()
    real_preadv = os.preadv

    def hung(*args: Any) -> int:
        release.wait(10)
        return real_preadv(*args)

    monkeypatch.setattr(os, "preadv", hung)
    dest = memoryview(bytearray(4096))
    start = time.monotonic()
    with pytest.raises(OSError) as info:
        _read_by(backend, how, key(1), dest)
    assert info.value.errno == errno.ETIMEDOUT and time.monotonic() - start < 5
    assert "NFS server not responding" in str(info.value)
    release.set()  # the abandoned read finishes now ...
    backend.close()  # ... and its thread is done with its private buffer
    time.sleep(0.2)
    assert bytes(dest) == bytes(4096)  # ... but never into the caller's buffer


def test_through_the_cache_errors_are_misses_and_the_tier_recovers(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "export"
    root.mkdir()
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "nfs", "backend": "nfs", "capacity_gb": 1, "path": str(root), "require_nfs_mount": False,
                   "unhealthy_after": 2, "reprobe_seconds": 1.0}],  # no re-probe before the health check
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    try:
        keys = [key(i) for i in range(4)]
        assert cache.put(keys, [bytes([i]) * 5000 for i in range(4)]) == [True] * 4
        real_preadv = os.preadv

        def eio(*args: Any) -> int:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(os, "preadv", eio)
        bufs = [bytearray(5000) for _ in keys]
        assert cache.get(keys, bufs) == [False] * 4
        health = cache.health()[0]
        assert not health["up"] and "consecutive errors" in health["reason"]
        monkeypatch.setattr(os, "preadv", real_preadv)
        assert _wait(lambda: cache.health()[0]["up"])
        assert cache.get(keys, bufs) == [True] * 4
        assert [bytes(b) for b in bufs] == [bytes([i]) * 5000 for i in range(4)]
    finally:
        cache.close()


def test_unmounted_path_starts_on_fallback_and_recovers_when_mounted(tmp_path: Path) -> None:
    root = tmp_path / "export"  # not there yet: the export is "not mounted"
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "nfs", "backend": "nfs", "capacity_gb": 1, "path": str(root), "require_nfs_mount": False,
                   "reprobe_seconds": 0.1}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    try:
        health = {h["tier"]: h for h in cache.health()}
        assert not health["nfs"]["up"] and "does not exist: is the NFS export mounted" in health["nfs"]["reason"]
        assert health["fallback"]["up"] and not root.exists()
        assert cache.put([key(1)], [b"f" * 100]) == [True]
        root.mkdir()  # the export is mounted again
        assert _wait(lambda: cache.health()[0]["up"])
        assert cache.put([key(2)], [b"n" * 100]) == [True]
        assert os.path.exists(NFSBackend(NFSConfig(path=root, require_nfs_mount=False)).path_of(key(2)))
    finally:
        cache.close()


WRITER = """
import sys
import lifeboatcache_backend_file.backend as file_mod
file_mod._HOST = sys.argv[2]  # another "host" writing to the same export
from lifeboatcache_backend_nfs.backend import NFSBackend, NFSConfig
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey
b = NFSBackend(NFSConfig(path=sys.argv[1], require_nfs_mount=False), tier="nfs")
k = BlockKey("contract", bytes(32))
data = sys.argv[2].encode() * 100_000
for _ in range(int(sys.argv[3])):
    b.put(k, [data], BlockMeta.new(k, len(data)))
"""


def test_writers_on_two_hosts_of_one_key_always_leave_a_valid_block(tmp_path: Path) -> None:
    backend = make_nfs(tmp_path)
    k = BlockKey("contract", bytes(32))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(backend.root), host, "60"])
             for host in ("hostA", "hostB")]
    seen = set()
    try:
        while any(p.poll() is None for p in procs):
            try:
                raw = Path(backend.path_of(k)).read_bytes()
            except FileNotFoundError:
                continue
            _, payload = decode_block(raw, k)  # raises if a reader ever saw a torn block
            seen.add(bytes(payload[:5]))
    finally:
        for p in procs:
            p.wait(60)
    assert all(p.returncode == 0 for p in procs)
    assert seen <= {b"hostA", b"hostB"} and seen
    assert bytes(backend.read(k)[1][:5]) in (b"hostA", b"hostB")
    assert not [p for p in backend.root.rglob("*.partial")]


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False
