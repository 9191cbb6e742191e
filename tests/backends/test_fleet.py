"""Two processes as two nodes sharing one S3 bucket (moto) and one PostgreSQL manifest."""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points as real_entry_points
from pathlib import Path
from typing import Any

import boto3
import pytest
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import decode_block
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing import ManifestStoreContract
from lifeboatcache_core.tier import Tier
from lifeboatcache_manifest_postgres.store import PostgresManifest
from sqlalchemy import create_engine, text

from lifeboatcache_core import plugins
from tests.backends.backend_servers import MotoServer, PostgresServer, free_port
from tests.backends.conftest import AWS_TEST_ENV

NS = "fleetns"
NODE = r"""
import json, sys
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

cache = TieredCache(load_config_dict(json.loads(sys.argv[1])), background_index=False)
print(json.dumps({"health": cache.health()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    keys = [BlockKey(cmd["ns"], bytes.fromhex(h)) for h in cmd["keys"]]
    if cmd["op"] == "put":
        ok = []
        for key, seed in zip(keys, cmd["seeds"]):  # one block per put: a crash lands between or inside puts
            ok += cache.put([key], [bytes([seed % 256]) * cmd["size"]])
        print(json.dumps({"ok": ok}), flush=True)
    elif cmd["op"] == "get":
        bufs = [bytearray(cmd["size"]) for _ in keys]
        ok = cache.get(keys, bufs)
        print(json.dumps({"ok": ok, "first": [b[0] if o else None for b, o in zip(bufs, ok)],
                          "uniform": all(b == bytes([b[0]]) * len(b) for b, o in zip(bufs, ok) if o)}), flush=True)
cache.close()
"""


class Node:
    """A lifeboatcache process driven over stdin/stdout with one JSON line per command."""

    def __init__(self, config: dict[str, Any], log: Path) -> None:
        self.log = open(log, "wb")  # closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-c", NODE, json.dumps(config)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **AWS_TEST_ENV})
        self.health = self._reply()["health"]

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"node exited with {self.proc.poll()}; see {self.log.name}"
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, op: str, keys: list[BlockKey], size: int, seeds: list[int] | None = None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "ns": NS, "keys": [k.hex for k in keys], "size": size,
                                          "seeds": seeds or []}) + "\n")
        self.proc.stdin.flush()

    def put(self, keys: list[BlockKey], size: int, seeds: list[int]) -> list[bool]:
        self.send("put", keys, size, seeds)
        return self._reply()["ok"]  # type: ignore[no-any-return]

    def get(self, keys: list[BlockKey], size: int) -> dict[str, Any]:
        self.send("get", keys, size)
        return self._reply()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture
def shared(moto: MotoServer, postgres: PostgresServer, tmp_path: Path) -> dict[str, Any]:
    bucket = f"fleet-{secrets.token_hex(4)}"
    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return {"bucket": bucket, "tier": f"shared-{secrets.token_hex(3)}", "endpoint": moto.endpoint,
            "manifest_url": postgres.url, "tmp": tmp_path}


def node_config(shared: dict[str, Any], node: str, capacity_bytes: int, **s3: Any) -> dict[str, Any]:
    return {
        "tiers": [{"name": shared["tier"], "backend": "s3", "capacity_gb": capacity_bytes / 1024**3,
                   "url": f"s3://{shared['bucket']}/kv", "endpoint_url": shared["endpoint"], "region": "us-east-1",
                   "manifest_url": shared["manifest_url"], "io_threads": 2, **s3}],
        "fallback_local": {"path": str(shared["tmp"] / f"fallback-{node}")},
    }


def fleet_rows(fleet: PostgresManifest) -> dict[BlockKey, int]:
    """The fleet's rows, key -> stored bytes."""
    return {BlockKey(ns, digest): stored for ns, digest, stored in fleet.load()}


def keys(start: int, n: int) -> list[BlockKey]:
    return [BlockKey(NS, i.to_bytes(4, "big") * 8) for i in range(start, start + n)]


def stored_objects(shared: dict[str, Any]) -> dict[str, bytes]:
    s3 = boto3.client("s3", endpoint_url=shared["endpoint"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    listing = s3.list_objects_v2(Bucket=shared["bucket"], Prefix="kv/").get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=shared["bucket"], Key=o["Key"])["Body"].read()
            for o in listing if o["Key"].endswith(".lbk")}


def test_two_nodes_see_each_others_blocks_at_once(shared: dict[str, Any]) -> None:
    a = Node(node_config(shared, "a", 10 * 1024**2), shared["tmp"] / "a.log")
    b = Node(node_config(shared, "b", 10 * 1024**2), shared["tmp"] / "b.log")
    try:
        assert a.health[0]["up"] and b.health[0]["up"], (a.health, b.health)
        assert a.put(keys(0, 5), 4096, list(range(5))) == [True] * 5
        seen = b.get(keys(0, 5), 4096)  # no restart, no rescan: B asks the shared manifest
        assert seen["ok"] == [True] * 5 and seen["first"] == list(range(5)) and seen["uniform"]
        assert b.put(keys(5, 3), 4096, [50, 51, 52]) == [True] * 3
        seen = a.get(keys(5, 3), 4096)
        assert seen["ok"] == [True] * 3 and seen["first"] == [50, 51, 52]
        assert a.get(keys(100, 1), 4096)["ok"] == [False]
    finally:
        a.stop()
        b.stop()


def test_fleet_capacity_is_shared_and_evictions_keep_rows_and_objects_in_step(shared: dict[str, Any]) -> None:
    size, capacity = 8192, 100_000  # room for about eleven blocks between both nodes
    a = Node(node_config(shared, "a", capacity), shared["tmp"] / "a.log")
    b = Node(node_config(shared, "b", capacity), shared["tmp"] / "b.log")
    try:
        a.send("put", keys(0, 30), size, list(range(30)))  # both nodes write at once
        b.send("put", keys(100, 30), size, list(range(100, 130)))
        assert a._reply()["ok"] == [True] * 30 and b._reply()["ok"] == [True] * 30
        fleet = PostgresManifest(shared["manifest_url"], shared["tier"])
        try:
            rows = fleet_rows(fleet)
            assert 0 < fleet.used() <= capacity
            assert 5 <= len(rows) < 60  # the fleet evicted ...
            assert capacity - fleet.used() < size + 1024  # ... only what it had to
        finally:
            fleet.close()
        objects = stored_objects(shared)
        assert {f"kv/{NS}/{k.hex[:2]}/{k.hex}.lbk" for k in rows} == set(objects)  # no orphans, no phantoms
        recent = keys(25, 5) + keys(125, 5)
        for node in (a, b):
            seen = node.get(recent, size)
            assert seen["uniform"] and all(ok == (k in rows) for ok, k in zip(seen["ok"], recent, strict=True))
    finally:
        a.stop()
        b.stop()


def test_a_node_killed_mid_write_leaves_no_visible_half_block(shared: dict[str, Any]) -> None:
    size = 6 * 1024**2  # multipart uploads of two parts each
    big = {"multipart_threshold_mb": 5, "part_size_mb": 5, "parallel_parts": 1}
    writer = Node(node_config(shared, "w", 1024**3, **big), shared["tmp"] / "w.log")
    writer.send("put", keys(0, 12), size, list(range(12)))
    time.sleep(random.Random(7).uniform(0.3, 0.9))  # somewhere inside the sequence of puts
    writer.kill()
    reader = Node(node_config(shared, "r", 1024**3, **big), shared["tmp"] / "r.log")
    try:
        fleet = PostgresManifest(shared["manifest_url"], shared["tier"])
        try:
            rows = fleet_rows(fleet)
        finally:
            fleet.close()
        objects = stored_objects(shared)
        for raw in objects.values():  # every visible object is a whole, valid block
            decode_block(raw)
        for k in rows:  # every row points at a whole block
            assert f"kv/{NS}/{k.hex[:2]}/{k.hex}.lbk" in objects
        seen = reader.get(keys(0, 12), size)
        assert seen["uniform"]
        assert [k in rows for k in keys(0, 12)] == seen["ok"]
        assert seen["ok"] != [True] * 12, "the writer was killed before finishing: some block must be missing"
    finally:
        reader.stop()


def test_unreachable_manifest_database_skips_the_tier_with_the_reason(shared: dict[str, Any]) -> None:
    config = node_config(shared, "x", 1024**2)
    config["tiers"][0]["manifest_url"] = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    config["tiers"][0]["reprobe_seconds"] = 60
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_TEST_ENV.items():
            mp.setenv(name, value)
        cache = TieredCache(load_config_dict(config), background_index=False)
    try:
        health = {h["tier"]: h for h in cache.health()}
        assert not health[shared["tier"]]["up"]
        assert "fleet manifest postgresql+psycopg://postgres@127.0.0.1:" in health[shared["tier"]]["reason"]
        assert "cannot be opened" in health[shared["tier"]]["reason"]
        assert health["fallback"]["up"]
    finally:
        cache.close()


def test_a_manifest_database_outage_is_a_miss_and_the_tier_recovers(shared: dict[str, Any]) -> None:
    database = PostgresServer()  # its own server: this test stops it
    config = node_config(shared, "o", 10 * 1024**2)
    config["tiers"][0].update(manifest_url=database.url, unhealthy_after=1, reprobe_seconds=0.2)
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name, value in AWS_TEST_ENV.items():
                mp.setenv(name, value)
            cache = TieredCache(load_config_dict(config), background_index=False)
            try:
                assert cache.put(keys(0, 2), [b"a" * 5000, b"b" * 5000]) == [True, True]
                database.halt()
                assert cache.put(keys(2, 1), [b"c" * 5000]) == [False]  # cannot publish: not stored
                health = cache.health()[0]
                assert not health["up"] and "fleet manifest" in health["reason"], health
                database.start()
                deadline = time.monotonic() + 20
                while not cache.health()[0]["up"] and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert cache.health()[0]["up"], cache.health()
                bufs = [bytearray(5000), bytearray(5000)]
                assert cache.get(keys(0, 2), bufs) == [True, True] and bytes(bufs[1]) == b"b" * 5000
                assert cache.put(keys(2, 1), [b"c" * 5000]) == [True]
            finally:
                cache.close()
    finally:
        database.stop()


def test_a_fleet_tier_added_through_apply_config_shares_the_fleet_manifest(
        postgres: PostgresServer, tmp_path: Path) -> None:
    """The Configure tab path: a PostgreSQL-manifest tier added live must be the fleet's, not a local tier.

    Regression: reconfiguration built every added tier as a plain ``Tier``, so its puts were
    published late (a batched local manifest) and other nodes did not see them.
    """
    shared_tier = {"name": f"shared-{secrets.token_hex(3)}", "backend": "file", "capacity_gb": 0.01,
                   "path": str(tmp_path / "shared"), "manifest_url": postgres.url}
    fallback = {"path": str(tmp_path / "fallback"), "capacity_gb": 0.01}
    local = {"name": "local", "backend": "file", "capacity_gb": 0.01, "path": str(tmp_path / "local")}
    node = TieredCache(load_config_dict({"tiers": [shared_tier], "fallback_local": fallback}),
                       background_index=False)
    cache = TieredCache(load_config_dict({"tiers": [local], "fallback_local": fallback}), background_index=False)
    try:
        assert cache.apply_config(load_config_dict({"tiers": [shared_tier], "fallback_local": fallback})) == []
        added = cache.all_tiers[0]
        assert added.name == shared_tier["name"] and added.up, cache.health()
        assert type(added) is type(node.all_tiers[0]) is Tier  # the class the cache picks at start ...
        assert type(added.manifest) is type(node.all_tiers[0].manifest) is PostgresManifest  # ... and its store
        assert cache.put(keys(0, 1), [b"f" * 5000]) == [True]
        fleet = PostgresManifest(postgres.url, shared_tier["name"])
        try:
            assert list(fleet_rows(fleet)) == keys(0, 1)  # published before the put returned
        finally:
            fleet.close()
        buf = bytearray(5000)
        assert node.get(keys(0, 1), [buf]) == [True] and bytes(buf) == b"f" * 5000  # the other node, at once
    finally:
        cache.close()
        node.close()


def test_the_fleet_lock_is_never_held_across_storage_io(postgres: PostgresServer, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A put that evicts fleet-wide deletes the victims' blocks after the transaction, not under its lock.

    Every node's puts wait for the tier's advisory lock: a slow store (S3 deletes, a hung NFS
    server) inside it would stall the whole fleet's writes.
    """
    size = 8192
    tier_config = {"name": f"shared-{secrets.token_hex(3)}", "backend": "file", "capacity_gb": 5 * size / 1024**3,
                   "path": str(tmp_path / "shared"), "manifest_url": postgres.url}
    cache = TieredCache(load_config_dict({"tiers": [tier_config], "fallback_local": {"path": str(tmp_path / "fb")}}),
                        background_index=False)
    probe = create_engine(postgres.url)
    locks_during_io: list[int] = []
    backend = cache.all_tiers[0].backend
    assert backend is not None
    for name in ("put", "delete", "delete_many"):
        def io(*args: Any, _call: Any = getattr(backend, name)) -> Any:
            with probe.connect() as conn:  # another session sees the lock a transaction holds
                locks_during_io.append(conn.execute(
                    text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).scalar_one())
            return _call(*args)
        monkeypatch.setattr(backend, name, io)
    try:
        assert all(cache.put([key], [bytes([i]) * size]) == [True] for i, key in enumerate(keys(0, 12)))
        assert cache.stats()[tier_config["name"]]["evictions"] > 0, "the fleet had to evict"
        assert locks_during_io and set(locks_during_io) == {0}, locks_during_io
    finally:
        cache.close()
        probe.dispose()


def test_a_postgresql_manifest_without_its_package_says_what_to_install(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheme is looked up like any plugin name: an uninstalled store is a reason naming its package."""
    dist = "lifeboatcache-manifest-postgres"

    def without_dist(**kwargs: Any) -> list[Any]:
        return [ep for ep in real_entry_points(**kwargs) if not (ep.dist and ep.dist.name == dist)]

    monkeypatch.setattr(plugins, "entry_points", without_dist)
    plugins.reset_registry()
    tier = {"name": "shared", "backend": "file", "capacity_gb": 0.01, "path": str(tmp_path / "shared"),
            "manifest_url": "postgresql+psycopg://lifeboat@127.0.0.1:1/lifeboat"}
    try:
        with TieredCache(load_config_dict({"tiers": [tier], "fallback_local": {"path": str(tmp_path / "fb")}}),
                         background_index=False) as cache:
            health = {h["tier"]: h for h in cache.health()}
        assert not health["shared"]["up"]
        assert dist in health["shared"]["reason"], health["shared"]
        assert "pip install 'lifeboatcache[postgresql]'" in health["shared"]["reason"], health["shared"]
    finally:
        monkeypatch.undo()
        plugins.reset_registry()


class TestPostgresManifest(ManifestStoreContract):
    """The shared store passes the contract every manifest store does (one server for every test)."""

    @pytest.fixture(autouse=True)
    def _server(self, postgres: PostgresServer) -> None:
        self.url = postgres.url

    def make_store(self, tmp_path: Path, tier: str) -> PostgresManifest:
        return PostgresManifest(self.url, tier)
