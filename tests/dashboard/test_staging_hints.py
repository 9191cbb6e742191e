"""Staging hints over the node endpoint: token-guarded like Configure, checked, and acted on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import GB, load_config_dict
from lifeboatcache_core.metrics import cache_sample
from starlette.testclient import TestClient

from lifeboatcache.dashboard.history import History
from lifeboatcache.dashboard.server import create_app

from .helpers import BLOCK, TOKEN, keys
from .test_api import metric

AUTH = {"X-Lifeboat-Token": TOKEN}


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[TieredCache]:
    data = {"tiers": [{"name": "dram", "backend": "dram", "capacity_gb": 64 * BLOCK / GB, "stage": True},
                      {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tmp_path / "tier")}],
            "fallback_local": {"path": str(tmp_path / "fallback"), "capacity_gb": 1}}
    with TieredCache(load_config_dict(data), background_index=False) as c:
        yield c


@pytest.fixture
def client(cache: TieredCache, tmp_path: Path) -> TestClient:
    app = create_app(cache, token=TOKEN, spool=tmp_path / "spool", allowed_hosts=["127.0.0.1"])
    return TestClient(app, base_url="http://127.0.0.1")


@pytest.mark.parametrize("path", ["/api/stage", "/api/release"])
@pytest.mark.parametrize("headers, status", [({}, 401), ({"X-Lifeboat-Token": "wrong-token-xxxxxxxxxxxx"}, 403),
                                             ({"Authorization": "Bearer nope"}, 403)])
def test_hints_without_the_token_are_refused(client: TestClient, cache: TieredCache, path: str,
                                             headers: dict[str, str], status: int) -> None:
    ks = keys(2)
    cache.put(ks, [os.urandom(BLOCK) for _ in ks], hints=[BlockHint(tag="s1", depth=i) for i in range(2)])
    assert client.post(path, json={"session": "s1", "eta_s": 0}, headers=headers).status_code == status
    assert cache.stager.sessions() == {}


@pytest.mark.parametrize("body", [{"eta_s": 1}, {"session": "", "eta_s": 1}, {"session": "s", "eta_s": -1},
                                  {"session": "s", "eta_s": "soon"}, {"session": "s", "eta_s": True},
                                  {"session": "s", "eta_s": 1, "extra": 1}, ["s", 1]])
def test_malformed_stage_hints_name_the_field(client: TestClient, body: Any) -> None:
    reply = client.post("/api/stage", json=body, headers=AUTH)
    assert reply.status_code == 422 and reply.json()["errors"]


def test_a_stage_hint_stages_and_a_release_takes_back(client: TestClient, cache: TieredCache) -> None:
    ks = keys(4)
    cache.put(ks, [os.urandom(BLOCK) for _ in ks], hints=[BlockHint(tag="s1", depth=i) for i in range(4)])
    cache.all_tiers[0].discard(ks)

    reply = client.post("/api/stage", json={"session": "s1", "eta_s": 0}, headers=AUTH)
    assert reply.status_code == 200 and reply.json()["blocks"] == 4
    assert cache.stager.wait_idle(30)
    assert all(cache.all_tiers[0].presence(k) for k in ks)
    assert metric(client.get("/metrics").text, "lifeboatcache_staged_bytes_total") == 4 * BLOCK

    reply = client.post("/api/release", json={"session": "s1"}, headers=AUTH)
    assert reply.status_code == 200 and reply.json()["wasted_bytes"] == 4 * BLOCK
    assert client.get("/api/stats").json()["cache"]["staged_wasted_bytes"] == 4 * BLOCK


def test_stats_and_history_say_where_staged_bytes_went(client: TestClient, cache: TieredCache) -> None:
    """/api/stats and the history carry staged, used, wasted, held and late, and they add up."""
    assert client.get("/api/stats").json()["staging"] == {
        "staged_bytes": 0, "used_bytes": 0, "wasted_bytes": 0, "held_bytes": 0, "late_arrivals": 0,
        "used_share": None, "wasted_share": None}
    ks = keys(4)
    cache.put(ks, [os.urandom(BLOCK) for _ in ks], hints=[BlockHint(tag="s1", depth=i) for i in range(4)])
    cache.all_tiers[0].discard(ks)
    assert cache.stage("s1", 0) == 4 and cache.stager.wait_idle(30)

    held = client.get("/api/stats").json()["staging"]
    assert (held["staged_bytes"], held["used_bytes"], held["held_bytes"]) == (4 * BLOCK, 0, 4 * BLOCK)

    assert cache.get(ks[:1], [bytearray(BLOCK)]) == [True]  # the session is back and reads one staged copy
    cache.release("s1")  # done: the three it did not read are taken back
    assert cache.stager.wait_idle(30)
    done = client.get("/api/stats").json()["staging"]
    assert done == {"staged_bytes": 4 * BLOCK, "used_bytes": BLOCK, "wasted_bytes": 3 * BLOCK, "held_bytes": 0,
                    "late_arrivals": 0, "used_share": 0.25, "wasted_share": 0.75}

    history = History(lambda: cache_sample(cache))
    history.observe(cache_sample(cache))
    point = history.points[-1]
    assert (point["staged_bytes"], point["staged_used_bytes"], point["staged_wasted_bytes"]) == (
        4 * BLOCK, BLOCK, 3 * BLOCK)

