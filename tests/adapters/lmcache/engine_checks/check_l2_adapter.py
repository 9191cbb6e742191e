"""LifeboatL2Adapter driven through LMCache 0.5.6's own code: its plugin adapter factory, real L1
memory objects, Bitmap/L2StoreResult and event fds, its `lmcache bench l2` harness, and its
multiprocess server. Runs in .venv-sglang-lmcache (see ../test_lmcache_engine.py).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch
from lifeboatcache_lmcache.l2_adapter import LifeboatL2Adapter, layout_tag
from lifeboatcache_lmcache.settings import l2_adapter_json
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.distributed.l2_adapters.plugin_l2_adapter import PluginL2AdapterConfig

from tests.adapters.lmcache.engine_checks.conftest import SHAPE, write_config

TIMEOUT = 60.0
DESC = {0: MemoryLayoutDesc(shapes=[torch.Size(SHAPE)], dtypes=[torch.bfloat16])}


def keys(n: int, model: str = "org/model", salt: str = "", start: int = 0) -> list[ObjectKey]:
    return [ObjectKey(chunk_hash=(start + i).to_bytes(4, "big") * 8, model_name=model, kv_rank=0x01000100,
                      cache_salt=salt) for i in range(n)]


def create(config_file: Path | None = None, **params: Any) -> Any:
    """Through LMCache's own plugin loader, as `--l2-adapter '{"type": "plugin", ...}'` does."""
    if config_file is not None:
        params.setdefault("lifeboat_config", str(config_file))
    spec = json.loads(l2_adapter_json(**params))
    assert spec["type"] == "plugin"
    spec.pop("type")
    return create_l2_adapter_from_registry(PluginL2AdapterConfig.from_dict(spec))


def wait_fd(fd: int) -> None:
    ready, _, _ = select.select([fd], [], [], TIMEOUT)
    assert ready, f"event fd {fd} was not signalled within {TIMEOUT}s"


def wait_one_shot(query: Any, fd: int, task_id: int) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        result = query(task_id)
        if result is not None:
            assert query(task_id) is None, "a result must be reported exactly once"
            return result
        select.select([fd], [], [], 0.05)
    raise AssertionError(f"task {task_id} did not finish")


def store(adapter: Any, ks: list[ObjectKey], objs: list[Any]) -> Any:
    task = adapter.submit_store_task(ks, objs)
    wait_fd(adapter.get_store_event_fd())
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        done = adapter.pop_completed_store_tasks()
        if task in done:
            return done[task]
        time.sleep(0.02)
    raise AssertionError(f"store task {task} did not finish")


def lookup(adapter: Any, ks: list[ObjectKey], descs: Any = DESC) -> list[int]:
    task = adapter.submit_lookup_and_lock_task(ks, descs)
    return wait_one_shot(adapter.query_lookup_and_lock_result, adapter.get_lookup_and_lock_event_fd(),
                         task).get_indices_list()


def load(adapter: Any, ks: list[ObjectKey], objs: list[Any]) -> list[int]:
    task = adapter.submit_load_task(ks, objs)
    return wait_one_shot(adapter.query_load_result, adapter.get_load_event_fd(), task).get_indices_list()


def raw(obj: Any) -> bytes:
    return bytes(obj.raw_data.numpy())


def test_loaded_by_lmcache_plugin_factory(config_file: Path, adapters: list[Any]) -> None:
    adapter = create(config_file)
    adapters.append(adapter)
    assert type(adapter) is LifeboatL2Adapter and adapter.cache is not None
    fds = {adapter.get_store_event_fd(), adapter.get_lookup_and_lock_event_fd(), adapter.get_load_event_fd()}
    assert len(fds) == 3
    assert adapter.report_status()["is_healthy"] is True


def test_store_lookup_lock_load_unlock(config_file: Path, make_obj: Any, adapters: list[Any]) -> None:
    adapter = create(config_file)
    adapters.append(adapter)
    ks = keys(4)
    objs = [make_obj(seed=i) for i in range(4)]
    result = store(adapter, ks, objs)
    assert result.is_successful() and result.bytes_transferred() == sum(o.get_size() for o in objs)
    again = store(adapter, ks, objs)  # the same chunks again: normal, nothing new written
    assert again.is_successful() and again.bytes_transferred() == 0

    probe = ks[:2] + keys(1, start=100) + ks[2:]
    assert lookup(adapter, probe) == [0, 1, 3, 4]
    assert adapter.locked_keys() == 4
    dest = [make_obj() for _ in probe]
    assert load(adapter, probe, dest) == [0, 1, 3, 4]
    assert [raw(dest[i]) for i in (0, 1, 3, 4)] == [raw(o) for o in objs]
    assert raw(dest[2]) == bytes(len(raw(dest[2])))  # the missing one is untouched
    adapter.submit_unlock(probe)
    assert adapter.locked_keys() == 0
    adapter.submit_unlock(probe + keys(2, start=500))  # unknown / already unlocked: still fine
    assert adapter.locked_keys() == 0


def test_namespaces_keep_models_salts_and_layouts_apart(config_file: Path, make_obj: Any,
                                                        adapters: list[Any]) -> None:
    adapter = create(config_file)
    adapters.append(adapter)
    ks = keys(2)
    assert store(adapter, ks, [make_obj(seed=1), make_obj(seed=2)]).is_successful()
    assert lookup(adapter, keys(2, model="org/other")) == []
    assert lookup(adapter, keys(2, salt="tenant-b")) == []
    fp16 = {0: MemoryLayoutDesc(shapes=[torch.Size(SHAPE)], dtypes=[torch.float16])}
    assert lookup(adapter, ks, fp16) == []  # same bytes per chunk, other dtype: never served
    assert load(adapter, ks, [make_obj(dtype=torch.float16), make_obj(dtype=torch.float16)]) == []
    assert layout_tag(DESC[0].shapes, DESC[0].dtypes) == "bfloat16[2, 2, 16, 32]"


def test_failed_store_is_reported_and_leaves_no_visible_key(tmp_path: Path, make_obj: Any,
                                                            adapters: list[Any]) -> None:
    # A tier too small for one object: every put is refused.
    adapter = create(write_config(tmp_path, capacity_gb=1e-6))
    adapters.append(adapter)
    ks = keys(3, start=40)
    result = store(adapter, ks, [make_obj(seed=i) for i in range(3)])
    assert not result.is_successful() and int(result) == -1
    assert lookup(adapter, ks) == []


def test_partly_failed_store_fails_the_task(tmp_path: Path, make_obj: Any, adapters: list[Any]) -> None:
    big = make_obj(seed=1, shape=(2, 2, 64, 1024))  # 512 KiB
    small = make_obj(seed=2)
    adapter = create(write_config(tmp_path, capacity_gb=300 / 1024**2))  # 300 KiB
    adapters.append(adapter)
    ks = keys(2, start=60)
    result = store(adapter, ks, [small, big])
    assert not result.is_successful()
    assert lookup(adapter, ks) == [0]  # the stored one is whole and readable; the other is absent
    dest = make_obj()
    assert load(adapter, ks[:1], [dest]) == [0] and raw(dest) == raw(small)


def test_chunks_survive_a_restart(config_file: Path, make_obj: Any, adapters: list[Any]) -> None:
    first = create(config_file)
    ks = keys(3, start=80)
    objs = [make_obj(seed=10 + i) for i in range(3)]
    assert store(first, ks, objs).is_successful()
    first.close()
    second = create(config_file)
    adapters.append(second)
    assert second.cache.wait_ready(30)
    assert lookup(second, ks) == [0, 1, 2]
    dest = [make_obj() for _ in ks]
    assert load(second, ks, dest) == [0, 1, 2]
    assert [raw(d) for d in dest] == [raw(o) for o in objs]


def test_damaged_chunk_is_a_failed_load_bit(tmp_path: Path, config_file: Path, make_obj: Any,
                                            adapters: list[Any]) -> None:
    first = create(config_file)
    ks = keys(3, start=120)
    objs = [make_obj(seed=20 + i) for i in range(3)]
    assert store(first, ks, objs).is_successful()
    first.close()
    [victim] = [p for p in (tmp_path / "tier").rglob(f"{ks[1].chunk_hash.hex()}*") if p.is_file()]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x55
    victim.write_bytes(bytes(data))

    second = create(config_file)
    adapters.append(second)
    second.cache.wait_ready(30)
    assert lookup(second, ks) == [0, 1, 2]  # presence is an index fact; bytes are checked on load
    dest = [make_obj() for _ in ks]
    assert load(second, ks, dest) == [0, 2]
    assert raw(dest[0]) == raw(objs[0]) and raw(dest[2]) == raw(objs[2])
    assert lookup(second, ks) == [0, 2]  # set aside after the failed check


class Heard:
    """An LMCache ``L2AdapterListener``: what the adapter told it."""

    def __init__(self) -> None:
        self.stored: list[ObjectKey] = []
        self.deleted: list[list[ObjectKey]] = []

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        self.stored.extend(keys)

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        pass

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        self.deleted.append(list(keys))


def two_tier_config(tmp_path: Path, *, nvme_gb: float = 1.0) -> Path:
    """DRAM over a write-through file tier: every object is held twice."""
    path = tmp_path / "two.toml"
    path.write_text(f'[[tiers]]\nname = "dram"\nbackend = "dram"\ncapacity_gb = 0.05\n\n'
                    f'[[tiers]]\nname = "nvme"\nbackend = "file"\npath = "{tmp_path / "tier"}"\n'
                    f'capacity_gb = {nvme_gb}\nwrite = "through"\n\n[fallback_local]\nenabled = false\n')
    return path


def settled(adapter: Any, expect: Any) -> None:
    """Wait until the adapter's waiters have settled the tiers' removals (``expect()`` holds)."""
    deadline = time.monotonic() + TIMEOUT
    while not expect():
        assert time.monotonic() < deadline, "removals were not settled"
        time.sleep(0.02)


def test_delete_removes_from_every_tier_and_usage_is_per_cache_salt(tmp_path: Path, make_obj: Any,
                                                                    adapters: list[Any]) -> None:
    """LMCache's delete (its per-salt quota eviction calls it) and get_usage().bytes_by_cache_salt."""
    config = two_tier_config(tmp_path)
    adapter = create(config)
    heard = Heard()
    adapter.register_listener(heard)
    alice, bob = keys(3, salt="alice"), keys(1, salt="bob", start=50)
    size = make_obj().get_size()
    assert store(adapter, alice + bob, [make_obj(seed=i) for i in range(4)]).is_successful()
    assert store(adapter, alice, [make_obj(seed=i) for i in range(3)]).bytes_transferred() == 0  # not again
    usage = adapter.get_usage()
    assert dict(usage.bytes_by_cache_salt) == {"alice": 3 * size, "bob": size}
    assert usage.total_bytes_used == 4 * size and heard.stored == alice + bob

    adapter.delete([alice[0], keys(1, salt="alice", start=99)[0]])  # one never stored
    assert heard.deleted == [[alice[0]]]  # told once, though two tiers held it
    assert dict(adapter.get_usage().bytes_by_cache_salt) == {"alice": 2 * size, "bob": size}
    assert lookup(adapter, alice + bob) == [1, 2, 3]
    adapter.delete(alice[1:])
    assert dict(adapter.get_usage().bytes_by_cache_salt) == {"bob": size}
    assert adapter.get_usage().total_bytes_used == size
    adapter.close()

    again = create(config)  # deleted from the file tier too, not demoted to it: gone after a restart
    adapters.append(again)
    assert again.cache.wait_ready(30)
    assert lookup(again, alice + bob) == [3]
    assert again.get_usage().total_bytes_used == 0  # counts what this process stored
    again.delete(bob)  # kept from the earlier run: removed, and told with no bytes
    assert lookup(again, bob) == [] and again.get_usage().total_bytes_used == 0


def test_tier_evictions_are_told_to_lmcache_and_leave_the_usage(tmp_path: Path, make_obj: Any,
                                                               adapters: list[Any]) -> None:
    """The tiers evict by their own policy; LMCache hears which objects no tier holds any more."""
    size = make_obj().get_size()
    adapter = create(write_config(tmp_path, capacity_gb=12 * size / 1024**3))
    adapters.append(adapter)
    heard = Heard()
    adapter.register_listener(heard)
    ks = keys(40, salt="s")
    for i, key in enumerate(ks):  # one by one, so each store sees the last one's evictions
        assert store(adapter, [key], [make_obj(seed=i)]).is_successful()
    held = lookup(adapter, ks)
    assert 0 < len(held) < len(ks)
    settled(adapter, lambda: adapter.counted_objects() == len(held))
    told = {k for batch in heard.deleted for k in batch}
    assert told == {ks[i] for i in range(len(ks)) if i not in held}
    assert sum(len(batch) for batch in heard.deleted) == len(told)  # each once
    assert dict(adapter.get_usage().bytes_by_cache_salt) == {"s": len(held) * size}


def test_lmcache_isolated_lru_quota_evicts_one_salt_through_our_delete(config_file: Path, make_obj: Any,
                                                                      adapters: list[Any]) -> None:
    """LMCache's own L2 eviction controller with its per-salt LRU and quotas, over our adapter."""
    from lmcache.v1.distributed.config import EvictionConfig
    from lmcache.v1.distributed.quota_manager import QuotaManager
    from lmcache.v1.distributed.storage_controllers.eviction_controller import (
        L2AdapterEvictionState,
        L2EvictionController,
    )

    adapter = create(config_file)
    adapters.append(adapter)
    size = make_obj().get_size()
    state = L2AdapterEvictionState(adapter_id=0, adapter=adapter, eviction_config=EvictionConfig(
        eviction_policy="IsolatedLRU", trigger_watermark=0.8, eviction_ratio=0.5))
    quotas = QuotaManager()
    quotas.set_quota("alice", 4 * size)
    quotas.set_quota("bob", 100 * size)
    alice, bob = keys(8, salt="alice"), keys(4, salt="bob", start=500)
    assert store(adapter, alice + bob, [make_obj(seed=i) for i in range(12)]).is_successful()
    controller = L2EvictionController([state], quota_manager=quotas)
    controller.start()
    try:
        settled(adapter, lambda: adapter.get_usage().bytes_by_cache_salt.get("alice", 0) < 0.8 * 4 * size)
    finally:
        controller.stop()
    kept = lookup(adapter, alice)
    assert len(kept) < 4 and adapter.get_usage().bytes_by_cache_salt["alice"] == len(kept) * size
    assert lookup(adapter, bob) == [0, 1, 2, 3]  # the other salt is untouched
    assert adapter.get_usage().bytes_by_cache_salt["bob"] == 4 * size


@pytest.mark.parametrize("problem", ["unknown_key", "bad_tier"])
def test_misconfiguration_serves_without_l2_or_fails(problem: str, tmp_path: Path, make_obj: Any,
                                                     adapters: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    if problem == "unknown_key":
        params: dict[str, Any] = {"lifeboat_config": str(write_config(tmp_path)), "lifeboat_confg": "x"}
        reason = "lifeboat_confg: unknown key"
    else:
        bad = tmp_path / "bad.toml"
        bad.write_text('[[tiers]]\nbackend = "flie"\ncapacity_gb = 1\n')
        params, reason = {"lifeboat_config": str(bad)}, "unknown backend 'flie'"
    spec = {"module_path": "lifeboatcache_lmcache.l2_adapter", "class_name": "LifeboatL2Adapter"}
    with caplog.at_level(logging.ERROR, logger="lifeboatcache.lmcache"):
        adapter = create_l2_adapter_from_registry(PluginL2AdapterConfig.from_dict(
            {**spec, "adapter_params": {**params, "on_error": "serve"}}))
    adapters.append(adapter)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and reason in errors[0] and "serves without it" in errors[0]
    assert adapter.report_status()["is_healthy"] is False
    ks = keys(2, start=200)
    assert not store(adapter, ks, [make_obj(seed=1), make_obj(seed=2)]).is_successful()
    assert lookup(adapter, ks) == [] and load(adapter, ks, [make_obj(), make_obj()]) == []

    with pytest.raises(RuntimeError, match=reason):
        create_l2_adapter_from_registry(PluginL2AdapterConfig.from_dict(
            {**spec, "adapter_params": {**params, "on_error": "fail"}}))


def test_lmcache_bench_l2_verifies_round_trips(config_file: Path) -> None:
    """LMCache's own adapter benchmark, with its data verification on."""
    exe = Path(sys.executable).with_name("lmcache")
    proc = subprocess.run(
        [str(exe), "bench", "l2", "--l2-adapter", l2_adapter_json(lifeboat_config=str(config_file)),
         "--num-keys", "16", "--in-flight", "2", "--data-size-kb", "64", "--rounds", "1", "--warmup-rounds", "1",
         "--lookup-max-hit-rate", "1.0", "--no-skip-verify", "--format", "json"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "LMCACHE_DISABLE_BANNER": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "data verified OK" in out, out[-3000:]
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[proc.stdout.index("{"):])
    ops = {op["operation"]: op for op in _dicts(report) if "operation" in op}
    assert ops["Store"]["total_success"] == ops["Store"]["total_keys"] > 0
    assert ops["Load"]["total_success"] == ops["Load"]["total_keys"]


def _dicts(node: Any) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    return [node] + [d for value in node.values() for d in _dicts(value)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_lmcache_mp_server_runs_with_the_adapter(config_file: Path, tmp_path: Path) -> None:
    """The real `lmcache server` (CPU, no engine attached) loads and reports the adapter."""
    port, http_port = _free_port(), _free_port()
    exe = Path(sys.executable).with_name("lmcache")
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [str(exe), "server", "--host", "localhost", "--port", str(port), "--http-port", str(http_port),
             "--l1-size-gb", "0.1", "--eviction-policy", "LRU",
             "--l2-adapter", l2_adapter_json(lifeboat_config=str(config_file))],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "LMCACHE_DISABLE_BANNER": "1"},
        )
    try:
        status = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/status", timeout=2) as resp:
                    status = json.loads(resp.read())
                    break
            except OSError:
                time.sleep(0.5)
        assert status is not None, f"server did not come up (rc {proc.poll()}):\n{log_path.read_text()[-3000:]}"
        text = json.dumps(status)
        assert '"type": "lifeboatcache"' in text and '"tier": "nvme"' in text, text[:3000]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
