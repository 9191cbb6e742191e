"""Restart recovery on your backend: a reopened tier finds what is really stored (DESIGN §5-6).

``RecoveryHelperContract`` checks the backend calls recovery relies on (``read_header``,
``list_keys``) on their own; mix it into your ``BackendContract`` subclass (it needs the
``damage`` hook of ``CorruptionContract``). ``RecoveryContract`` checks the whole restart.

The restart path is where a persistent backend meets the rest of the core: the manifest's rows
are loaded, then reconciled with the backend's ``list_keys`` / ``read_header`` / ``exists``, so a
backend whose listing misses a namespace, whose header read trusts a wrong key or whose
``exists`` lies makes a restarted tier serve misses for blocks it has, or keep rows it lost.
These checks open a real :class:`~lifeboatcache_core.cache.TieredCache` over the backend, with
the ``sqlite:`` manifest store in ``tmp_path`` (the file the checks delete and rebuild):

    from lifeboatcache_core.testing import RecoveryContract

    class TestMyStoreRecovery(RecoveryContract):
        def tier_options(self, tmp_path):
            return {"backend": "mystore", "url": f"mystore://{tmp_path}"}  # same storage per tmp_path
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lifeboatcache_core.abc import Backend
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import sqlite_url
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_core.testing.contracts import key
from lifeboatcache_core.tier import Tier

MANIFEST_FILE = "recovery-contract.sqlite"
BLOCK = 3000


def _key(i: int) -> BlockKey:
    return BlockKey("recovery-contract", hashlib.sha256(b"recovery-%d" % i).digest())


def _blob(i: int) -> bytes:
    return hashlib.sha256(b"blob-%d" % i).digest() * (BLOCK // 32) + bytes(BLOCK % 32)


class RecoveryHelperContract:
    """``read_header`` and ``list_keys`` as recovery uses them. Mix into a ``BackendContract``
    subclass that also defines ``damage`` (``CorruptionContract``'s hook)."""

    def test_read_header_matches_the_block(self, backend: Backend) -> None:
        data = os.urandom(9000)
        k = key(40)
        stored = backend.put(k, [data], BlockMeta.new(k, len(data)))
        meta, size = backend.read_header(k)
        assert (meta.key, meta.namespace, meta.raw_len, size) == (k.hex, k.namespace, len(data), stored)
        with pytest.raises(KeyError):
            backend.read_header(key(41))

    def test_read_header_of_a_damaged_header_is_corrupt(self, backend: Backend) -> None:
        k = key(42)
        backend.put(k, [b"h" * 500], BlockMeta.new(k, 500))
        self.damage(backend, k, lambda raw: raw[:30] + bytes([raw[30] ^ 1]) + raw[31:])  # type: ignore[attr-defined]
        with pytest.raises(CorruptBlockError):
            backend.read_header(k)

    def test_list_keys_names_every_block(self, backend: Backend) -> None:
        written = [key(i) for i in range(50, 55)]
        for k in written:
            backend.put(k, [b"l" * 10], BlockMeta.new(k, 10))
        assert sorted(backend.list_keys()) == sorted(written)


class RecoveryContract:
    """A tier over your backend, closed and reopened: every stored block is served again, and only those."""

    def tier_options(self, tmp_path: Path) -> dict[str, Any]:
        """The tier's table without ``name``/``capacity_gb``/``manifest_url``: ``backend`` and its
        options. Two calls with the same ``tmp_path`` must reach the same storage (a restart)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers

    def _config(self, tmp_path: Path) -> Any:
        tier = {**self.tier_options(tmp_path), "name": "recovering", "capacity_gb": 1.0,
                "manifest_url": sqlite_url(tmp_path / MANIFEST_FILE)}
        return load_config_dict({"tiers": [tier], "fallback_local": {"enabled": False}})

    @contextmanager
    def _open(self, tmp_path: Path) -> Iterator[tuple[TieredCache, Tier]]:
        cache = TieredCache(self._config(tmp_path), background_index=False)
        try:
            yield cache, cache.tiers[0]
        finally:
            cache.close()

    def _behind_its_back(self, tmp_path: Path) -> Backend:
        """A second instance of the backend on the same storage, which the tier's manifest never hears of."""
        tc = self._config(tmp_path).tiers[0]
        return get_registry().load("backend", tc.backend)(tc.backend_options, tier=tc.label)  # type: ignore[no-any-return]

    @staticmethod
    def _served(cache: TieredCache, n: int) -> list[bytes | None]:
        out = [bytearray(BLOCK) for _ in range(n)]
        hits = cache.get([_key(i) for i in range(n)], out)
        return [bytes(o) if hit else None for hit, o in zip(hits, out, strict=True)]

    def _store(self, tmp_path: Path, n: int) -> int:
        """Store blocks 0..n-1 through a tier; the stored bytes it accounted for."""
        with self._open(tmp_path) as (cache, tier):
            assert cache.put([_key(i) for i in range(n)], [_blob(i) for i in range(n)]) == [True] * n
            return int(tier.snapshot()["bytes_used"])

    # ------------------------------------------------------------------ checks

    def test_a_restart_indexes_every_block_from_the_manifest(self, tmp_path: Path) -> None:
        self._store(tmp_path, 12)
        with self._open(tmp_path) as (cache, tier):
            progress = tier.recovery
            assert progress.phase == "done" and tier.index_complete
            assert (progress.manifest_rows, progress.added_from_files, progress.missing_files) == (12, 0, 0)
            assert progress.listed == 12, "list_keys must name every stored block once"
            assert self._served(cache, 12) == [_blob(i) for i in range(12)]

    def test_a_lost_manifest_is_rebuilt_from_the_stored_blocks(self, tmp_path: Path) -> None:
        used = self._store(tmp_path, 12)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp_path / MANIFEST_FILE}{suffix}").unlink(missing_ok=True)
        with self._open(tmp_path) as (cache, tier):
            assert tier.recovery.manifest_rows == 0 and tier.recovery.added_from_files == 12
            assert tier.snapshot()["bytes_used"] == used, "read_header must give each block's stored size"
            assert self._served(cache, 12) == [_blob(i) for i in range(12)]
        with self._open(tmp_path) as (_cache, tier):  # the rebuilt rows are the next restart's manifest
            assert tier.recovery.manifest_rows == 12 and tier.recovery.added_from_files == 0

    def test_blocks_removed_and_added_behind_the_manifests_back_are_reconciled(self, tmp_path: Path) -> None:
        self._store(tmp_path, 10)
        other = self._behind_its_back(tmp_path)
        try:
            for i in range(3):
                other.delete(_key(i))
            for i in range(10, 15):
                other.put(_key(i), [_blob(i)], BlockMeta.new(_key(i), BLOCK))
        finally:
            other.close()
        with self._open(tmp_path) as (cache, tier):
            progress = tier.recovery
            assert (progress.manifest_rows, progress.missing_files, progress.added_from_files) == (10, 3, 5)
            assert len(tier.index) == 12
            assert self._served(cache, 15) == [None] * 3 + [_blob(i) for i in range(3, 15)]
