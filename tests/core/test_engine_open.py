"""``open_for_engine``: the one opener every adapter uses, and ``engine.on_error`` serve/fail."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig, config_from_env, engine_on_error, load_config_dict
from lifeboatcache_core.engine import EngineTexts, open_for_engine
from lifeboatcache_core.keys import Namespace

from lifeboatcache_core import engine

log = logging.getLogger("lifeboatcache.test-engine")


class EngineRefused(RuntimeError):
    pass


TEXTS = EngineTexts(log=log, error=EngineRefused, refuse="engine refuses: {exc}", serve="serving without it: %s")


def config(tmp_path: Path, path: Path | None = None, on_error: str = "serve") -> LifeboatConfig:
    tier = {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(path or tmp_path / "t")}
    return load_config_dict({"tiers": [tier], "engine": {"on_error": on_error},
                             "fallback_local": {"path": str(tmp_path / "fb"), "capacity_gb": 1}})


@pytest.fixture
def dashboards(monkeypatch: pytest.MonkeyPatch) -> list[TieredCache]:
    started: list[TieredCache] = []
    monkeypatch.setattr(engine, "start_dashboard", started.append)
    return started


def test_opens_registers_the_namespace_then_starts_the_dashboard(tmp_path: Path,
                                                                 dashboards: list[TieredCache]) -> None:
    ns = Namespace("test", "m", digest_bytes=8)
    seen: list[tuple[str, bool]] = []
    cache = open_for_engine(lambda: config(tmp_path), on_error=lambda: "fail", texts=TEXTS, namespace=lambda: ns,
                            ready=lambda c: seen.append((ns.id, ns.id in c._namespaces and not dashboards)))
    assert cache is not None
    try:
        assert seen == [(ns.id, True)]  # ready ran after the registration, before the dashboard
        assert dashboards == [cache]
        assert cache.put([ns.key(b"\1" * 8)], [b"x" * 64]) == [True]
    finally:
        cache.close()


def test_a_failed_set_up_serves_without_the_cache_in_one_line(tmp_path: Path, dashboards: list[TieredCache],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> LifeboatConfig:
        raise ValueError("no such key: lifeboat_confg")

    told: list[tuple[str, str]] = []
    with caplog.at_level(logging.ERROR, logger=log.name):
        cache = open_for_engine(broken, on_error=lambda: "serve", texts=TEXTS,
                                disabled=lambda exc, policy: told.append((str(exc), policy)))
    assert cache is None and dashboards == []
    assert [r.getMessage() for r in caplog.records] == ["serving without it: no such key: lifeboat_confg"]
    assert told == [("no such key: lifeboat_confg", "serve")]


def test_on_error_fail_refuses_with_the_adapters_error_and_closes_the_cache(tmp_path: Path,
                                                                             dashboards: list[TieredCache]) -> None:
    built: list[TieredCache] = []

    def ready(cache: TieredCache) -> None:
        built.append(cache)
        raise OSError("host pool not registered")

    with pytest.raises(EngineRefused, match="engine refuses: host pool not registered") as refused:
        open_for_engine(lambda: config(tmp_path), on_error=lambda: "fail", texts=TEXTS, ready=ready)
    assert isinstance(refused.value.__cause__, OSError)
    assert built and built[0]._closed.is_set() and dashboards == []


@pytest.mark.parametrize("on_error", ["serve", "fail"])
def test_a_tier_down_at_start_is_a_refusal_only_under_fail(tmp_path: Path, on_error: Any,
                                                           dashboards: list[TieredCache]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cfg = config(tmp_path, blocker / "tier", on_error)
    if on_error == "fail":
        with pytest.raises(EngineRefused, match="tiers not available: nvme"):
            open_for_engine(lambda: cfg, on_error=lambda: on_error, texts=TEXTS)
        return
    cache = open_for_engine(lambda: cfg, on_error=lambda: on_error, texts=TEXTS)
    assert cache is not None
    try:
        assert [t.name for t in cache.tiers] == ["fallback"]  # serves on the local fallback
    finally:
        cache.close()


def test_engine_on_error_reads_a_broken_config_leniently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tiers]]\nbackend = 'flie'\n[engine]\non_error = 'fail'\n")
    assert engine_on_error(lambda: config_from_env(str(bad))) == "serve"  # unreadable: the default
    assert engine_on_error(lambda: config_from_env(str(bad)), "fail") == "fail"  # the adapter's override
    assert engine_on_error(lambda: config(tmp_path, on_error="fail"), "bogus") == "fail"
    good = tmp_path / "good.toml"
    good.write_text("[engine]\non_error = 'fail'\n")
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(good))
    assert config_from_env().engine.on_error == "fail" and config_from_env(None).engine.on_error == "fail"
