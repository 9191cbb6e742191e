"""S3 backend against moto's real HTTP server on loopback, with faults from a TCP proxy."""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis.stateful import run_state_machine_as_test
from lifeboatcache_backend_s3.backend import S3Backend
from lifeboatcache_backend_s3.config import S3Config
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.errors import CorruptBlockError, TierUnavailableError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing import (
    BackendContract,
    ClaimedSizeContract,
    CorruptionContract,
    RecoveryHelperContract,
    backend_state_machine,
    claiming_block,
)
from lifeboatcache_core.testing.contracts import RecordingSink, key

from tests.backends.backend_faultproxy import FaultProxy
from tests.backends.backend_lying_s3 import LyingS3
from tests.backends.backend_servers import MotoServer, free_port
from tests.backends.conftest import AWS_TEST_ENV

_names = itertools.count()


def new_bucket(endpoint: str) -> str:
    name = f"lifeboat-{next(_names)}-{secrets.token_hex(3)}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def s3_options(endpoint: str, bucket: str, **extra: Any) -> dict[str, Any]:
    return {"url": f"s3://{bucket}/kv", "endpoint_url": endpoint, "region": "us-east-1",
            "max_attempts": 2, "connect_timeout_s": 1.0, "read_timeout_s": 2.0, **extra}


def make_s3(endpoint: str, bucket: str | None = None, **extra: Any) -> S3Backend:
    bucket = bucket or new_bucket(endpoint)
    return S3Backend(S3Config(**s3_options(endpoint, bucket, **extra)), tier="s3")


@pytest.fixture(scope="module")
def contract_bucket(moto: MotoServer) -> Iterator[str]:
    """One bucket for the contract tests; each test has its own prefix in it."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_TEST_ENV.items():
            mp.setenv(name, value)
        yield new_bucket(moto.endpoint)


def contract_s3(endpoint: str, bucket: str, where: Path) -> S3Backend:
    """A backend whose prefix is derived from ``where``: the same ``where`` reopens the same store."""
    prefix = hashlib.sha256(str(where).encode()).hexdigest()[:16]
    return S3Backend(S3Config(**{**s3_options(endpoint, bucket), "url": f"s3://{bucket}/{prefix}"}), tier="s3")


@pytest.mark.usefixtures("aws_env")
class TestS3Contract(RecoveryHelperContract, BackendContract, CorruptionContract, ClaimedSizeContract):
    @pytest.fixture(autouse=True)
    def _server(self, moto: MotoServer, contract_bucket: str) -> Iterator[None]:
        self.endpoint, self.bucket = moto.endpoint, contract_bucket
        self._liars: list[LyingS3] = []
        yield
        for liar in self._liars:
            liar.__exit__()

    def make_claiming_backend(self, tmp_path: Path, k: BlockKey, claimed: int) -> S3Backend:
        """An endpoint whose object says 1 TiB and sends 12 MiB: the first part and two ranged
        parts arrive whole (5 MiB parts), the next is cut short."""
        liar = LyingS3(*claiming_block(k, claimed, 12 * 2**20)).__enter__()
        self._liars.append(liar)
        options = s3_options(liar.endpoint, "liar", part_size_mb=5, multipart_threshold_mb=5, max_attempts=1)
        return S3Backend(S3Config(**options), tier="s3")

    def make_backend(self, tmp_path: Path) -> S3Backend:
        return contract_s3(self.endpoint, self.bucket, tmp_path)

    def damage(self, backend: S3Backend, k: BlockKey, mutate: Callable[[bytes], bytes]) -> None:
        name = backend.object_name(k)
        raw = backend.client.get_object(Bucket=backend.bucket, Key=name)["Body"].read()
        backend.client.put_object(Bucket=backend.bucket, Key=name, Body=mutate(raw))

    def test_read_lands_in_the_callers_buffer_without_a_copy(self, backend: S3Backend) -> None:
        k, data = key(1), block(1, 10_000)
        store(backend, k, data)
        dest = memoryview(bytearray(len(data)))
        assert backend.read(k, dest)[1].obj is dest.obj


def test_s3_state_machine(moto: MotoServer, contract_bucket: str, aws_env: None) -> None:
    machine = backend_state_machine(lambda d: contract_s3(moto.endpoint, contract_bucket, d), max_examples=3,
                                    stateful_step_count=10)
    run_state_machine_as_test(machine, settings=machine.TestCase.settings)


def block(i: int, size: int = 3000) -> bytes:
    return (i.to_bytes(4, "big") * (size // 4 + 1))[:size]


def store(backend: S3Backend, k: BlockKey, data: bytes) -> int:
    return backend.put(k, [memoryview(data)], BlockMeta.new(k, len(data)))


@pytest.fixture
def proxy(moto: MotoServer, aws_env: None) -> Iterator[FaultProxy]:
    p = FaultProxy(moto.port).start()
    yield p
    p.stop()


def test_quarantine_keeps_a_copy_under_bad(moto: MotoServer, aws_env: None) -> None:
    backend = make_s3(moto.endpoint)
    k = key(1)
    store(backend, k, block(1))
    backend.quarantine(k, "test")
    names = [o["Key"] for o in backend.client.list_objects_v2(Bucket=backend.bucket)["Contents"]]
    assert len(names) == 1 and names[0].startswith(f"kv/.bad/{k.namespace}/{k.hex}.")
    assert list(backend.scan()) == []


def test_large_block_multipart_upload_and_parallel_ranged_gets(moto: MotoServer, aws_env: None) -> None:
    backend = make_s3(moto.endpoint, multipart_threshold_mb=5, part_size_mb=5, parallel_parts=3)
    k, data = key(2), secrets.token_bytes(12 * 1024 * 1024 + 123)
    stored = store(backend, k, data)
    head = backend.client.head_object(Bucket=backend.bucket, Key=backend.object_name(k))
    assert head["ContentLength"] == stored
    assert head["ETag"].strip('"').endswith("-3")  # three parts: a multipart upload
    dest = memoryview(bytearray(len(data)))
    _, payload = backend.read(k, dest)
    assert payload.obj is dest.obj and bytes(dest) == data


def test_retries_absorb_one_throttle_and_one_reset(proxy: FaultProxy) -> None:
    backend = make_s3(f"http://127.0.0.1:{proxy.port}", bucket=new_bucket(f"http://127.0.0.1:{proxy.upstream_port}"))
    store(backend, key(1), block(1))
    for mode in ("throttle", "reset", "http500"):
        proxy.set(mode, budget=1)
        assert bytes(backend.read(key(1))[1]) == block(1)


def test_probe_reasons_name_the_problem(moto: MotoServer, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    def reason(endpoint: str, bucket: str, **extra: Any) -> str:
        backend = make_s3(endpoint, bucket=bucket, max_attempts=1, **extra)  # one try: the reason, quickly
        with pytest.raises(TierUnavailableError) as info:
            backend.probe()
        return str(info.value)

    via_proxy = f"http://127.0.0.1:{proxy.port}"
    assert "bucket 'no-such-bucket' does not exist" in reason(moto.endpoint, "no-such-bucket")
    assert "cannot connect to http://127.0.0.1:" in reason(f"http://127.0.0.1:{free_port()}", "b")
    bucket = new_bucket(moto.endpoint)
    proxy.set("throttle")
    assert "throttling requests (HTTP 503 SlowDown)" in reason(via_proxy, bucket)
    proxy.set("http500")
    assert "answered HTTP 500 InternalError" in reason(via_proxy, bucket)
    proxy.set("slow", delay=3.0)
    assert "did not answer in time" in reason(via_proxy, bucket, read_timeout_s=0.3)
    proxy.set("reset")
    assert f"connection to {via_proxy} was cut" in reason(via_proxy, bucket)
    proxy.set("truncate")
    assert f"probe GET: connection to {via_proxy} was cut" in reason(via_proxy, bucket)
    proxy.set("pass")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert "no AWS credentials found" in reason(moto.endpoint, bucket)


def test_bad_credentials_skip_the_tier_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      aws_env: None) -> None:
    """moto with authentication on (INITIAL_NO_AUTH_ACTION_COUNT=0) rejects an unknown access key."""
    server = MotoServer(tmp_path, env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")
    try:
        cache = TieredCache(LifeboatConfig.model_validate({
            "tiers": [{"name": "s3", "backend": "s3", "capacity_gb": 1, **s3_options(server.endpoint, "b")}],
            "fallback_local": {"path": str(tmp_path / "fallback")},
        }), background_index=False)
        try:
            health = {h["tier"]: h for h in cache.health()}
            assert not health["s3"]["up"]
            assert f"credentials rejected by {server.endpoint} (InvalidAccessKeyId)" in health["s3"]["reason"]
            assert "AKIAUNKNOWNKEY000000" not in health["s3"]["reason"]
            assert health["fallback"]["up"] and cache.put([key(1)], [block(1)]) == [True]
        finally:
            cache.close()
    finally:
        server.stop()


def test_secrets_never_appear_in_config_repr_or_reasons(moto: MotoServer, tmp_path: Path) -> None:
    cfg = S3Config(**s3_options(f"http://127.0.0.1:{free_port()}", "b"), access_key_id="AKIDSECRET",
                   secret_access_key="verysecretvalue")
    backend = S3Backend(cfg, tier="s3")
    with pytest.raises(TierUnavailableError) as info:
        backend.probe()
    for text in (repr(cfg), str(cfg.model_dump()), str(info.value)):
        assert "AKIDSECRET" not in text and "verysecretvalue" not in text


@pytest.mark.parametrize("mode", ["http500", "throttle", "reset", "truncate", "slow"])
def test_faults_while_serving_are_misses_and_mark_the_tier_down(proxy: FaultProxy, tmp_path: Path, mode: str) -> None:
    """A failing S3 never crashes the caller or returns wrong bytes; health says why."""
    bucket = new_bucket(f"http://127.0.0.1:{proxy.upstream_port}")
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "s3", "backend": "s3", "capacity_gb": 1, "unhealthy_after": 2, "reprobe_seconds": 0.2,
                   **s3_options(f"http://127.0.0.1:{proxy.port}", bucket, read_timeout_s=0.5)}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    try:
        keys = [key(i) for i in range(4)]
        data = [block(i, 20_000) for i in range(4)]
        assert cache.put(keys, data) == [True] * 4
        proxy.set(mode, delay=2.0)
        bufs = [bytearray(20_000) for _ in keys]
        found = cache.get(keys, bufs)
        assert found == [False] * 4
        assert all(b == bytearray(20_000) or bytes(b) == d for b, d in zip(bufs, data, strict=True))
        health = {h["tier"]: h for h in cache.health()}["s3"]
        # the reason names the endpoint; the re-probe may already have replaced the error count with its own
        assert not health["up"] and f"http://127.0.0.1:{proxy.port}" in health["reason"], health
        assert cache.stats()["s3"]["errors"] >= 2
        proxy.set("pass")
        assert _wait(lambda: cache.health()[0]["up"]), cache.health()
        assert cache.get(keys, bufs) == [True] * 4 and [bytes(b) for b in bufs] == data
    finally:
        cache.close()


def test_unreachable_endpoint_starts_on_fallback_and_recovers(moto: MotoServer, aws_env: None, tmp_path: Path) -> None:
    bucket = new_bucket(moto.endpoint)
    port = free_port()  # nothing listens here yet
    cache = TieredCache(LifeboatConfig.model_validate({
        "tiers": [{"name": "s3", "backend": "s3", "capacity_gb": 1, "reprobe_seconds": 0.2,
                   **s3_options(f"http://127.0.0.1:{port}", bucket)}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    }), background_index=False)
    proxy = None
    try:
        health = {h["tier"]: h for h in cache.health()}
        assert not health["s3"]["up"] and f"cannot connect to http://127.0.0.1:{port}" in health["s3"]["reason"]
        assert health["fallback"]["up"]
        assert cache.put([key(1)], [block(1)]) == [True]  # served by the local fallback
        proxy = FaultProxy(moto.port, port=port).start()  # the endpoint comes back
        assert _wait(lambda: cache.health()[0]["up"]), cache.health()
        assert cache.put([key(2)], [block(2)]) == [True]
        assert make_s3(moto.endpoint, bucket=bucket).exists(key(2))
    finally:
        cache.close()
        if proxy is not None:
            proxy.stop()


def _wait(cond: Any, timeout: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_restart_indexes_from_the_local_manifest_and_read_header_is_small(moto: MotoServer, aws_env: None,
                                                                          tmp_path: Path) -> None:
    bucket = new_bucket(moto.endpoint)
    config = LifeboatConfig.model_validate({
        "tiers": [{"name": "s3", "backend": "s3", "capacity_gb": 1, **s3_options(moto.endpoint, bucket)}],
        "fallback_local": {"path": str(tmp_path / "fallback")},
    })
    blocks = [key(i) for i in range(6)]
    with TieredCache(config, background_index=False) as cache:
        assert cache.put(blocks, [block(i, 7000) for i in range(6)]) == [True] * 6
    with TieredCache(config, background_index=False) as cache:
        tier = cache.all_tiers[0]
        assert tier.recovery.manifest_rows == 6 and tier.recovery.added_from_files == 0
        assert tier.backend is not None and tier.backend.default_manifest_url().startswith(
            f"sqlite:///{tmp_path}/xdg-cache/lifeboatcache/manifests/s3-{bucket}-")
        bufs = [bytearray(7000) for _ in blocks]
        assert cache.get(blocks, bufs) == [True] * 6 and bytes(bufs[3]) == block(3, 7000)
    backend = make_s3(moto.endpoint, bucket=bucket)
    meta, stored = backend.read_header(blocks[2])
    assert meta.key == blocks[2].hex and meta.raw_len == 7000 and stored == dict(backend.scan())[blocks[2]]


def test_bulk_calls_run_concurrently_and_delete_many_sends_no_head(moto: MotoServer, aws_env: None) -> None:
    backend = make_s3(moto.endpoint, parallel_requests=4)
    calls: list[str] = []
    in_flight, most = [0], [0]
    lock = threading.Lock()

    def before(model: Any, **_: Any) -> None:
        with lock:
            calls.append(model.name)
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.05)  # a round trip long enough for the requests of one batch to overlap

    def after(**_: Any) -> None:
        with lock:
            in_flight[0] -= 1

    backend.client.meta.events.register("before-call.s3.*", before)
    backend.client.meta.events.register("after-call.s3.*", after)
    try:
        ks = [key(i) for i in range(8)]
        items = [(k, [memoryview(block(i))], BlockMeta.new(k, len(block(i)))) for i, k in enumerate(ks)]
        assert all(isinstance(n, int) for n in backend.write_many(items))
        got = backend.read_many([*ks, key(99)])
        assert [bytes(o[1]) for o in got[:8] if not isinstance(o, Exception)] == [block(i) for i in range(8)]
        assert isinstance(got[8], KeyError)
        assert most[0] > 1, "a bulk call's requests must overlap"
        most[0] = 0
        sinks = [RecordingSink() for _ in ks]
        read = backend.read_payload_many(ks, sinks, [None] * len(ks))
        assert not any(isinstance(o, Exception) for o in read)
        assert [sink.payload for sink in sinks] == [block(i) for i in range(8)]
        assert most[0] > 1, "a bulk payload read's requests must overlap (a coding tier's get)"
        calls.clear()
        assert backend.delete_many([*ks[:5], key(99)]) == [None] * 6
        assert calls == ["DeleteObject"] * 6  # no HEAD per key
        assert [backend.exists(k) for k in ks] == [False] * 5 + [True] * 3
    finally:
        backend.close()


def test_bulk_failures_are_reported_per_key(moto: MotoServer, aws_env: None) -> None:
    backend = make_s3(moto.endpoint)
    try:
        store(backend, key(1), block(1))
        backend.client.put_object(Bucket=backend.bucket, Key=backend.object_name(key(2)), Body=b"not a block")
        first, second, third = backend.read_many([key(1), key(2), key(3)])
        assert not isinstance(first, Exception) and bytes(first[1]) == block(1)
        assert isinstance(second, CorruptBlockError) and isinstance(third, KeyError)
    finally:
        backend.close()
