"""Work on the engine's thread (issue 18): computed once, checked once, no storage I/O.

An engine calls ``Namespace.id``, ``submit_put``/``submit_get_into`` and ``exists`` from its
scheduler thread; anything repeated per key there, or any backend round trip, stalls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from lifeboatcache_backend_file.backend import FileBackend
from lifeboatcache_core.abc import ManifestStore, Row
from lifeboatcache_core.config import TierConfig
from lifeboatcache_core.hookspecs import hookimpl
from lifeboatcache_core.keys import BlockKey, Namespace
from lifeboatcache_core.plugins import get_registry, register_plugin, unregister_plugin
from lifeboatcache_core.tier import Tier

from lifeboatcache_core import keys as keys_module

from .helpers import blobs, file_tier, keys, open_cache


def test_namespace_id_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    canonical = Namespace.canonical

    def counted(self: Namespace) -> bytes:
        calls.append(1)
        return canonical(self)

    monkeypatch.setattr(Namespace, "canonical", counted)
    ns = Namespace("vllm", "m", digest_bytes=8)
    ids = {ns.key(i.to_bytes(8, "big")).namespace for i in range(100)} | {ns.id}
    assert len(ids) == 1 and len(calls) == 1
    assert Namespace("vllm", "m", digest_bytes=8).id == ns.id  # the same id in a fresh object
    assert ns.for_tenant("t").id != ns.id  # a tenant is a new namespace with its own id


def test_a_key_is_checked_once_on_the_put_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    check_key = keys_module.check_key

    def counted(key: BlockKey, digest_bytes: int | None = None) -> None:
        calls.append(key)
        check_key(key, digest_bytes)

    ns = Namespace("test", "m", digest_bytes=8)
    with open_cache(tmp_path) as cache:
        cache.register_namespace(ns)
        monkeypatch.setattr(keys_module, "check_key", counted)
        key = ns.key(b"\1" * 8)
        assert cache.put([key], [b"x" * 4096]) == [True]
    assert len(calls) == 1


def test_key_checks_still_reject_bad_keys(tmp_path: Path) -> None:
    from lifeboatcache_core.errors import InvalidKeyError

    key = BlockKey("ns", b"\1" * 8)
    with pytest.raises(InvalidKeyError):
        key._replace(namespace="..")  # namedtuple's copy must not skip the path checks
    ns = Namespace("test", "m", digest_bytes=8)
    with open_cache(tmp_path) as cache:
        cache.register_namespace(ns)
        assert cache.put([BlockKey(ns.id, b"\1" * 16)], [b"x"]) == [False]  # wrong digest length


def test_may_have_runs_once_per_key_on_the_get_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ks, data = keys(4), blobs(4, 4096)
    calls: list[BlockKey] = []
    may_have = Tier.may_have

    def counted(self: Tier, key: BlockKey) -> bool:
        calls.append(key)
        return may_have(self, key)

    with open_cache(tmp_path) as cache:
        assert cache.put(ks, data) == [True] * 4
        monkeypatch.setattr(Tier, "may_have", counted)
        out = [bytearray(4096) for _ in ks]
        assert cache.get(ks, out) == [True] * 4
    assert len(calls) == len(ks)


@pytest.fixture
def counted_exists(monkeypatch: pytest.MonkeyPatch) -> list[BlockKey]:
    calls: list[BlockKey] = []
    exists = FileBackend.exists

    def counted(self: FileBackend, key: BlockKey) -> bool:
        calls.append(key)
        return exists(self, key)

    monkeypatch.setattr(FileBackend, "exists", counted)
    return calls


def test_non_blocking_exists_on_a_shared_tier_does_no_backend_io(tmp_path: Path,
                                                                  counted_exists: list[BlockKey]) -> None:
    ks, data = keys(3), blobs(2, 4096)
    tier = file_tier(tmp_path / "t", shared=True)
    with open_cache(tmp_path / "reader", tier) as reader, open_cache(tmp_path / "writer", tier) as writer:
        assert reader.wait_ready(30) and writer.wait_ready(30)
        assert writer.put(ks[:2], data) == [True, True]
        counted_exists.clear()
        assert reader.exists(ks, blocking=False) == [False, False, False]
        assert reader.presence(ks) == [None, None, None]  # only the shared storage could tell
        assert writer.presence(ks) == [True, True, None]
        assert counted_exists == []
        assert reader.exists(ks) == [True, True, False]  # the blocking answer still asks storage
        assert len(counted_exists) == 3


def test_presence_is_false_where_no_tier_can_hold_the_key(tmp_path: Path, counted_exists: list[BlockKey]) -> None:
    ks, data = keys(2), blobs(1, 4096)
    with open_cache(tmp_path) as cache:
        assert cache.put(ks[:1], data) == [True]
        assert cache.presence(ks) == [True, False]
        assert cache.presence([BlockKey.trusted("x", b"")]) == [False]  # an invalid key is never present
        assert cache.exists(ks, blocking=False) == cache.exists(ks) == [True, False]
    assert counted_exists == []


def test_presence_is_unknown_while_a_tier_is_still_indexing(tmp_path: Path, monkeypatch: Any,
                                                           counted_exists: list[BlockKey]) -> None:
    ks = keys(1)
    with open_cache(tmp_path) as cache:
        monkeypatch.setattr(cache.all_tiers[0], "index_complete", False)
        assert cache.presence(ks) == [None]
        assert cache.exists(ks, blocking=False) == [False]
    assert counted_exists == []


class FakeFleet(ManifestStore):
    """A shared manifest store (as the PostgreSQL one is) that records its lookups: it holds no rows."""

    shared = True
    asked: ClassVar[list[BlockKey]] = []

    def load(self) -> list[Row]:
        return []

    def lookup(self, key: BlockKey) -> int | None:
        self.asked.append(key)
        return None

    def commit_put(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None,
                   capacity: int | None = None) -> list[BlockKey]:
        return []

    def record_delete(self, key: BlockKey) -> None:
        pass

    def record_access(self, key: BlockKey) -> None:
        pass


class FakeFleetPlugin:
    @hookimpl
    def lifeboatcache_add_manifests(self, register: Any) -> None:
        register.manifest("fakefleet", f"{__name__}:FakeFleet")


def test_a_fleet_tier_asks_its_manifest_on_the_read_pool_not_in_may_have(tmp_path: Path) -> None:
    register_plugin(FakeFleetPlugin(), "fakefleet")
    tier = Tier(TierConfig(name="s3", backend="file", capacity_gb=1, path=str(tmp_path),
                           manifest_url="fakefleet://db"), get_registry())  # the URL's scheme picks the store
    key = keys(1)[0]
    FakeFleet.asked.clear()
    try:
        assert tier.open()
        tier.load_index()
        assert isinstance(tier.manifest, FakeFleet) and tier.index_complete
        assert tier.may_have(key) and tier.presence(key) is None  # the fleet may hold it: worth a read
        assert FakeFleet.asked == []  # ... but no SQL on the caller's thread
        assert tier.fetch(key, memoryview(bytearray(16))) is None  # the read (pool) asks the fleet
        assert tier.has(key) is False
        assert FakeFleet.asked == [key, key]
    finally:
        tier.close()
        unregister_plugin("fakefleet")
