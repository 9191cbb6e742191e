"""fsspec backend on memory:// and file:// (the filesystems fsspec itself ships)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis.stateful import run_state_machine_as_test
from lifeboatcache_backend_fsspec.backend import FsspecBackend, public_url
from lifeboatcache_backend_fsspec.config import FsspecConfig
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import BlockMeta
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
from lifeboatcache_core.testing.contracts import key


def memory_backend(where: Path) -> FsspecBackend:
    """memory:// is process-wide: a root derived from ``where`` is a fresh store per test."""
    root = hashlib.sha256(str(where).encode()).hexdigest()[:16]
    return FsspecBackend(FsspecConfig(url=f"memory://lifeboat-{root}"), tier="fsspec")


def file_backend(where: Path) -> FsspecBackend:
    return FsspecBackend(FsspecConfig(url=f"file://{where}/tier"), tier="fsspec")


class _Damage:
    def damage(self, backend: FsspecBackend, k: BlockKey, mutate: Callable[[bytes], bytes]) -> None:
        path = backend.path_of(k)
        backend.fs.pipe_file(path, mutate(backend.fs.cat_file(path)))


class TestFsspecMemory(_Damage, RecoveryHelperContract, BackendContract, CorruptionContract):
    def make_backend(self, tmp_path: Path) -> FsspecBackend:
        return memory_backend(tmp_path)


class TestFsspecFile(_Damage, RecoveryHelperContract, BackendContract, CorruptionContract):
    def make_backend(self, tmp_path: Path) -> FsspecBackend:
        return file_backend(tmp_path)

    def test_writes_land_by_rename(self, backend: FsspecBackend) -> None:
        assert backend._rename
        k = key(1)
        backend.put(k, [b"z" * 100], BlockMeta.new(k, 100))
        assert not list(Path(backend.root).rglob("*.partial"))


class TestFsspecMemoryRecovery(RecoveryContract):
    def tier_options(self, tmp_path: Path) -> dict[str, object]:
        return {"backend": "fsspec", "url": memory_backend(tmp_path).config.url}


def test_memory_state_machine() -> None:
    machine = backend_state_machine(memory_backend, max_examples=10, stateful_step_count=15)
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


def test_file_state_machine() -> None:
    machine = backend_state_machine(file_backend, max_examples=10, stateful_step_count=15)
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


def test_protocol_not_installed_is_a_reason(tmp_path: Path) -> None:
    with pytest.raises(TierUnavailableError, match=r"nosuchproto://bucket/kv: .*nosuchproto"):
        FsspecBackend(FsspecConfig(url="nosuchproto://bucket/kv"), tier="fsspec")


def test_credentials_in_the_url_never_reach_messages() -> None:
    assert public_url("sftp://user:hunter2@host/path") == "sftp://***@host/path"


class _FlakyMemory(MemoryFileSystem):
    """memory:// whose reads fail with a non-OSError, as some implementations' errors are."""

    protocol = "flakymem"
    failing = False

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if self.failing and "r" in mode:
            raise RuntimeError("backend exploded")
        return super()._open(path, mode, **kwargs)


def test_foreign_errors_are_io_misses_and_the_tier_recovers(tmp_path: Path) -> None:
    fsspec.register_implementation("flakymem", _FlakyMemory, clobber=True)
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "remote", "backend": "fsspec", "capacity_gb": 1, "url": "flakymem://lifeboat-flaky",
                   "unhealthy_after": 2, "reprobe_seconds": 0.1}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    try:
        keys = [key(i) for i in range(3)]
        assert cache.put(keys, [bytes([i]) * 999 for i in range(3)]) == [True] * 3
        _FlakyMemory.failing = True
        bufs = [bytearray(999) for _ in keys]
        assert cache.get(keys, bufs) == [False] * 3
        health = cache.health()[0]
        assert not health["up"] and "RuntimeError: backend exploded" in health["reason"]
        _FlakyMemory.failing = False
        deadline = time.monotonic() + 10
        while not cache.health()[0]["up"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cache.get(keys, bufs) == [True] * 3
        assert [bytes(b) for b in bufs] == [bytes([i]) * 999 for i in range(3)]
    finally:
        _FlakyMemory.failing = False
        cache.close()
