"""LifeboatHiCacheStorage driven through SGLang 0.5.23's own code: its dynamic backend factory,
a real MHA host pool, and HiCacheController's page get/set functions (zero-copy and generic).

Runs in .venv-sglang-lmcache (see ../test_sglang_engine.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.adapters.sglang.engine_checks import sglang_import_shim
from tests.adapters.sglang.engine_checks.conftest import PAGE, write_config

sglang_import_shim.install()  # before the first SGLang import

from lifeboatcache_sglang.settings import dynamic_extra_config  # noqa: E402
from lifeboatcache_sglang.storage import LifeboatHiCacheStorage  # noqa: E402
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

LAYOUTS = ["page_first", "layer_first", "page_first_direct"]


def page_hashes(n: int, salt: str = "") -> list[str]:
    """SGLang-shaped page keys: a SHA-256 chain, 64 lowercase hex characters each."""
    out, prev = [], b""
    for i in range(n):
        prev = hashlib.sha256(prev + f"{salt}page{i}".encode()).digest()
        out.append(prev.hex())
    return out


def create(storage_config: Any, pool: Any = None) -> Any:
    """The way SGLang creates it: the registry-less ``dynamic`` path, then host-pool registration."""
    backend = StorageBackendFactory.create_backend("dynamic", storage_config, pool)
    if pool is not None:
        backend.register_mem_pool_host(pool)
    return backend


def fill_pages(pool: Any, first_token: int, n_pages: int, seed: int) -> torch.Tensor:
    """Random KV into host pages; returns their token indices."""
    indices = torch.arange(first_token, first_token + n_pages * PAGE)
    gen = torch.Generator().manual_seed(seed)
    for i in range(n_pages):
        flat = torch.randn(pool.get_data_page(indices[i * PAGE]).numel(), generator=gen).to(pool.dtype)
        pool.set_from_flat_data_page(int(indices[i * PAGE]), flat)
    return indices


def page_bytes(pool: Any, indices: torch.Tensor, n_pages: int) -> list[bytes]:
    return [bytes(pool.get_data_page(int(indices[i * PAGE]), flat=True).view(torch.uint8).numpy())
            for i in range(n_pages)]


def controller(backend: Any, pool: Any) -> Any:
    """Just enough of a HiCacheController for its page get/set functions (SGLang's code)."""
    return SimpleNamespace(storage_backend=backend, storage_host_pool=pool, mem_pool_host=pool, page_size=PAGE)


OPERATION = SimpleNamespace(request_id="check", is_terminated=lambda: False)


def test_is_a_hicache_storage_loaded_by_the_dynamic_factory(config_file: Path, make_storage_config: Any,
                                                           backends: list[Any]) -> None:
    assert issubclass(LifeboatHiCacheStorage, HiCacheStorage)
    extra = dynamic_extra_config(lifeboat_config=str(config_file))
    assert extra["module_path"] == "lifeboatcache_sglang.storage" and extra["interface_v1"] is True
    backend = create(make_storage_config(extra))
    backends.append(backend)
    assert type(backend) is LifeboatHiCacheStorage and backend.enabled


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_copy_round_trip_through_the_controller(layout: str, config_file: Path, make_storage_config: Any,
                                                      make_host_pool: Any, backends: list[Any]) -> None:
    pool = make_host_pool(layout)
    backend = create(make_storage_config(dynamic_extra_config(lifeboat_config=str(config_file))), pool)
    backends.append(backend)
    ctl = controller(backend, pool)
    n = 6
    keys = page_hashes(n)
    src = fill_pages(pool, PAGE, n, seed=1)
    expected = page_bytes(pool, src, n)

    assert backend.batch_exists(keys) == 0
    assert HiCacheController._page_set_zero_copy(ctl, keys, src) is True
    assert backend.batch_exists(keys) == n
    assert HiCacheController._page_set_zero_copy(ctl, keys, src) is True  # re-put is normal

    dst = torch.arange(20 * PAGE, (20 + n) * PAGE)
    assert HiCacheController._page_get_zero_copy(ctl, OPERATION, keys, dst) == n
    assert page_bytes(pool, dst, n) == expected
    assert backend.stats()["sglang"]["pages_read"] == n


def test_generic_path_through_the_controller(config_file: Path, make_storage_config: Any,
                                             make_host_pool: Any, backends: list[Any]) -> None:
    pool = make_host_pool("page_first")
    extra = dynamic_extra_config(lifeboat_config=str(config_file), interface_v1=False)
    backend = create(make_storage_config(extra), pool)
    backends.append(backend)
    ctl = controller(backend, pool)
    keys = page_hashes(4, "generic")
    src = fill_pages(pool, 2 * PAGE, 4, seed=2)
    expected = page_bytes(pool, src, 4)
    assert HiCacheController._generic_page_set(ctl, keys, src) is True
    dst = torch.arange(24 * PAGE, 28 * PAGE)
    assert HiCacheController._generic_page_get(ctl, OPERATION, keys, dst) == 4
    assert page_bytes(pool, dst, 4) == expected
    single = pool.get_dummy_flat_data_page()
    assert backend.get(keys[0], single) is single and backend.exists(keys[0])
    assert backend.get(page_hashes(1, "absent")[0], pool.get_dummy_flat_data_page()) is None


def test_single_pages_at_memory_addresses(config_file: Path, make_storage_config: Any, make_host_pool: Any,
                                         backends: list[Any]) -> None:
    """``set``/``get`` also take a page as an address and a size (Mooncake's zero-copy form, used by
    the storage tests SGLang ships: tools/upstream_suites/run_sglang_storage_tests.py); ``get``
    then answers whether it arrived. A ``set`` given no bytes at all stores nothing, and says so."""
    backend = create(make_storage_config(dynamic_extra_config(lifeboat_config=str(config_file))),
                     make_host_pool("page_first"))
    backends.append(backend)
    src, dst = torch.arange(256, dtype=torch.float32), torch.zeros(256, dtype=torch.float32)
    key, absent = page_hashes(2, "address")
    assert backend.set(key, target_location=src.data_ptr(), target_sizes=src.nbytes) is True
    assert backend.exists(key)
    assert backend.get(key, target_location=dst.data_ptr(), target_sizes=dst.nbytes) is True
    assert torch.equal(src, dst)
    assert backend.get(absent, target_location=dst.data_ptr(), target_sizes=dst.nbytes) is False
    assert backend.set(absent) is False and not backend.exists(absent)
    assert backend.batch_set([absent], [None]) is False
    counters = backend.stats()["sglang"]
    assert counters["pages_written"] == 1 and counters["pages_read"] == 1 and counters["pages_read_missed"] == 1


def test_batch_exists_stops_at_the_first_missing_page(config_file: Path, make_storage_config: Any,
                                                      make_host_pool: Any, backends: list[Any]) -> None:
    pool = make_host_pool("page_first")
    backend = create(make_storage_config(dynamic_extra_config(lifeboat_config=str(config_file))), pool)
    backends.append(backend)
    keys = page_hashes(5)
    src = fill_pages(pool, PAGE, 5, seed=3)
    stored = [0, 1, 3, 4]
    idx = torch.cat([src[i * PAGE:(i + 1) * PAGE] for i in stored])
    assert backend.batch_set_v1([keys[i] for i in stored], idx) == [True] * 4
    assert backend.batch_exists(keys) == 2
    assert backend.batch_exists(keys[3:]) == 2
    got = backend.batch_get_v1(keys, torch.arange(25 * PAGE, 30 * PAGE))
    assert got == [True, True, False, True, True]  # per-key truth; SGLang counts the prefix


def test_pages_survive_a_restart(config_file: Path, make_storage_config: Any, make_host_pool: Any,
                                 backends: list[Any]) -> None:
    extra = dynamic_extra_config(lifeboat_config=str(config_file))
    pool = make_host_pool("page_first")
    first = create(make_storage_config(extra), pool)
    keys = page_hashes(3, "restart")
    src = fill_pages(pool, PAGE, 3, seed=4)
    expected = page_bytes(pool, src, 3)
    assert first.batch_set_v1(keys, src) == [True] * 3
    first.close()

    fresh_pool = make_host_pool("page_first")
    second = create(make_storage_config(extra), fresh_pool)
    backends.append(second)
    assert second.cache.wait_ready(30)
    assert second.batch_exists(keys) == 3
    dst = torch.arange(10 * PAGE, 13 * PAGE)
    assert second.batch_get_v1(keys, dst) == [True] * 3
    assert page_bytes(fresh_pool, dst, 3) == expected


def test_a_damaged_page_is_a_miss_and_the_rest_still_load(tmp_path: Path, config_file: Path,
                                                          make_storage_config: Any, make_host_pool: Any,
                                                          backends: list[Any]) -> None:
    extra = dynamic_extra_config(lifeboat_config=str(config_file))
    pool = make_host_pool("page_first")
    first = create(make_storage_config(extra), pool)
    keys = page_hashes(3, "damage")
    src = fill_pages(pool, PAGE, 3, seed=5)
    expected = page_bytes(pool, src, 3)
    assert first.batch_set_v1(keys, src) == [True] * 3
    first.close()
    [victim] = [p for p in (tmp_path / "tier").rglob(f"{keys[1]}*") if p.is_file()]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))

    second = create(make_storage_config(extra), make_host_pool("page_first"))
    backends.append(second)
    second.cache.wait_ready(30)
    dst = torch.arange(10 * PAGE, 13 * PAGE)
    assert second.batch_get_v1(keys, dst) == [True, False, True]
    got = page_bytes(second.mem_pool_host, dst, 3)
    assert got[0] == expected[0] and got[2] == expected[2]
    assert second.batch_exists(keys) == 1  # the damaged page left the index: SGLang recomputes from there
    assert second.stats()["tiers"]["nvme"]["corrupt_blocks"] == 1


def test_ranks_are_separate_for_mha_and_shared_for_mla(config_file: Path, make_storage_config: Any,
                                                      make_host_pool: Any, backends: list[Any]) -> None:
    """MHA: each TP rank stores its own shard; MLA: one object per page that every rank reads."""
    extra = dynamic_extra_config(lifeboat_config=str(config_file))
    keys = page_hashes(2, "ranks")
    mha = [create(make_storage_config(extra, tp_rank=r, tp_size=2), make_host_pool("page_first")) for r in (0, 1)]
    mla = [create(make_storage_config(extra, tp_rank=r, tp_size=2, mla=True), make_host_pool("page_first"))
           for r in (0, 1)]
    backends += mha + mla
    assert mha[0].namespace_id != mha[1].namespace_id
    assert mla[0].namespace_id == mla[1].namespace_id != mha[0].namespace_id
    assert mha[0].batch_set_v1(keys, fill_pages(mha[0].mem_pool_host, PAGE, 2, seed=6)) == [True, True]
    assert mha[1].batch_exists(keys) == 0
    # A rank that starts after the writer finds the MLA pages (its index is rebuilt from the tier).
    assert mla[0].batch_set_v1(keys, fill_pages(mla[0].mem_pool_host, PAGE, 2, seed=6)) == [True, True]
    late = create(make_storage_config(extra, tp_rank=1, tp_size=2, mla=True), make_host_pool("page_first"))
    backends.append(late)
    assert late.cache.wait_ready(30) and late.batch_exists(keys) == 2


def test_mla_readers_see_the_writer_on_a_shared_tier(tmp_path: Path, make_storage_config: Any,
                                                     make_host_pool: Any, backends: list[Any],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Every MLA rank is its own process with its own index: `shared = true` makes rank 0's later
    writes visible to rank 1 (SGLang MIN-reduces hits over ranks, so this decides any hit)."""
    with caplog.at_level(logging.WARNING, logger="lifeboatcache.sglang"):
        create(make_storage_config(dynamic_extra_config(lifeboat_config=str(write_config(tmp_path / "a"))),
                                   tp_rank=1, tp_size=2, mla=True)).close()
    assert any("no tier is `shared = true`" in r.getMessage() for r in caplog.records)
    extra = dynamic_extra_config(lifeboat_config=str(write_config(tmp_path, extra_tier="shared = true")))
    writer, reader = (create(make_storage_config(extra, tp_rank=r, tp_size=2, mla=True), make_host_pool("page_first"))
                      for r in (0, 1))
    backends += [writer, reader]
    reader.cache.wait_ready(30)
    keys = page_hashes(3, "shared-mla")
    src = fill_pages(writer.mem_pool_host, PAGE, 3, seed=9)
    assert writer.batch_set_v1(keys, src) == [True] * 3
    assert reader.batch_exists(keys) == 3
    dst = torch.arange(10 * PAGE, 13 * PAGE)
    assert reader.batch_get_v1(keys, dst) == [True] * 3
    assert page_bytes(reader.mem_pool_host, dst, 3) == page_bytes(writer.mem_pool_host, src, 3)


def test_another_layout_or_model_does_not_see_the_pages(config_file: Path, make_storage_config: Any,
                                                        make_host_pool: Any, backends: list[Any]) -> None:
    extra = dynamic_extra_config(lifeboat_config=str(config_file))
    writer_pool = make_host_pool("page_first")
    writer = create(make_storage_config(extra), writer_pool)
    backends.append(writer)
    keys = page_hashes(2, "ns")
    assert writer.batch_set_v1(keys, fill_pages(writer_pool, PAGE, 2, seed=7)) == [True, True]
    other_layout = create(make_storage_config(extra), make_host_pool("layer_first"))
    other_model = create(make_storage_config(extra, model="test-org/other-model"), make_host_pool("page_first"))
    backends += [other_layout, other_model]
    assert other_layout.batch_exists(keys) == 0 and other_model.batch_exists(keys) == 0


def test_get_stats_feeds_sglang_metrics(config_file: Path, make_storage_config: Any, make_host_pool: Any,
                                        backends: list[Any]) -> None:
    from sglang.srt.observability.metrics_collector import StorageMetrics

    pool = make_host_pool("page_first")
    backend = create(make_storage_config(dynamic_extra_config(lifeboat_config=str(config_file)), metrics=True),
                     pool)
    backends.append(backend)
    keys = page_hashes(3, "metrics")
    backend.batch_set_v1(keys, fill_pages(pool, PAGE, 3, seed=8))
    backend.batch_get_v1(keys, torch.arange(20 * PAGE, 23 * PAGE))
    stats = backend.get_stats()
    assert isinstance(stats, StorageMetrics)
    assert stats.backup_pgs == [3] and stats.prefetch_pgs == [3]
    assert stats.prefetch_bandwidth[0] > 0 and stats.backup_bandwidth[0] > 0
    assert backend.get_stats().prefetch_pgs == []  # drained


@pytest.mark.parametrize("problem", ["unknown_key", "bad_tier"])
def test_misconfiguration_serves_uncached_or_fails(problem: str, tmp_path: Path, make_storage_config: Any,
                                                   make_host_pool: Any, backends: list[Any],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    if problem == "unknown_key":
        extra = {**dynamic_extra_config(lifeboat_config=str(write_config(tmp_path))), "lifeboat_confg": "x"}
        reason = "lifeboat_confg: unknown key"
    else:
        bad = tmp_path / "bad.toml"
        bad.write_text('[[tiers]]\nbackend = "flie"\ncapacity_gb = 1\n')
        extra = dynamic_extra_config(lifeboat_config=str(bad))
        reason = "unknown backend 'flie'"
    pool = make_host_pool("page_first")
    with caplog.at_level(logging.ERROR, logger="lifeboatcache.sglang"):
        backend = create(make_storage_config({**extra, "lifeboat_on_error": "serve"}), pool)
    backends.append(backend)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and reason in errors[0].getMessage() and "serving uncached" in errors[0].getMessage()
    keys = page_hashes(2, problem)
    assert not backend.enabled
    assert backend.batch_set_v1(keys, torch.arange(PAGE, 3 * PAGE)) == [False, False]
    assert backend.batch_exists(keys) == 0
    assert backend.batch_get_v1(keys, torch.arange(PAGE, 3 * PAGE)) == [False, False]

    with pytest.raises(RuntimeError, match=reason):
        create(make_storage_config({**extra, "lifeboat_on_error": "fail"}), pool)


def test_launch_server_plugin_adds_flags_sglang_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's own plugin discovery finds us, and its own parser takes the flags we add."""
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group
    from sglang.srt.server_args import prepare_server_args

    plugins = load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    assert "lifeboatcache" in plugins
    monkeypatch.setenv("LIFEBOAT_CACHE", "1")
    monkeypatch.setattr(sys, "argv", ["/venv/site-packages/sglang/launch_server.py", "--model-path", "/m"])
    plugins["lifeboatcache"][0]()
    args = prepare_server_args(sys.argv[1:])
    assert args.enable_hierarchical_cache and args.hicache_storage_backend == "dynamic" and args.page_size == 64
    extra = json.loads(args.hicache_storage_backend_extra_config)
    assert extra["class_name"] == "LifeboatHiCacheStorage" and extra["interface_v1"] is True

    monkeypatch.setattr(sys, "argv", ["/venv/site-packages/sglang/launch_server.py", "--model-path", "/m",
                                      "--hicache-storage-backend", "file"])
    plugins["lifeboatcache"][0]()
    assert prepare_server_args(sys.argv[1:]).hicache_storage_backend == "file"  # an explicit backend wins
