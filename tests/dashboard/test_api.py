"""The dashboard's HTTP API against a real cache: numbers, config reads and guarded writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_core.cache import TieredCache
from starlette.testclient import TestClient

from lifeboatcache.dashboard.server import REDACTED, create_app

from .helpers import BLOCK, TOKEN, open_cache, traffic

AUTH = {"X-Lifeboat-Token": TOKEN}


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[TieredCache]:
    with open_cache(tmp_path) as c:
        yield c


@pytest.fixture
def client(cache: TieredCache, tmp_path: Path) -> TestClient:
    app = create_app(cache, token=TOKEN, spool=tmp_path / "spool", allowed_hosts=["127.0.0.1", "localhost"])
    return TestClient(app, base_url="http://127.0.0.1")


def metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} missing from /metrics")


def test_page_and_fixed_static_files(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    assert "http" not in page.text.replace("http-equiv", "")  # no CDN, nothing external
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/index.html", "/static/history.py"):
        assert client.get(path).status_code == 404, path


def test_metrics_and_stats_follow_traffic(client: TestClient, cache: TieredCache) -> None:
    before = client.get("/api/stats").json()
    assert before["cache"]["lookup_blocks"] == 0 and before["hit_rate_blocks"] == 0
    traffic(cache, stored=6, looked_up=8)
    text = client.get("/metrics").text
    assert metric(text, "lifeboatcache_lookup_blocks_total") == 8
    assert metric(text, "lifeboatcache_lookup_hit_blocks_total") == 6
    assert metric(text, "lifeboatcache_bytes_served_total") == 6 * BLOCK
    assert metric(text, 'lifeboatcache_puts_total{tier="nvme"}') == 6
    assert metric(text, 'lifeboatcache_tier_up{tier="nvme"}') == 1
    stats = client.get("/api/stats").json()
    assert stats["hit_rate_blocks"] == 6 / 8 and stats["processes"] == 1
    (tier,) = stats["tiers"]
    assert tier["name"] == "nvme" and tier["blocks"] == 6 and tier["tier_up"] == 1 and tier["reason"] == "ok"
    assert tier["compression_ratio"] == 6 * BLOCK / tier["bytes_written"]
    assert tier["occupancy"] == tier["bytes_used"] / 1024**3
    assert stats["get_p50_s"] is not None


def test_down_tier_shows_its_reason(client: TestClient, cache: TieredCache) -> None:
    cache.all_tiers[0].mark_down("NFS export not responding (test)")
    (tier,) = client.get("/api/stats").json()["tiers"]
    assert tier["tier_up"] == 0 and tier["reason"] == "NFS export not responding (test)"
    assert 'reason="NFS export not responding (test)"' in client.get("/metrics").text


def test_running_config_redacts_the_token(tmp_path: Path) -> None:
    with open_cache(tmp_path, dashboard={"token": TOKEN}) as cache:
        client = TestClient(create_app(cache, token=TOKEN), base_url="http://127.0.0.1")
        body = client.get("/api/config").json()
        assert body["config"]["dashboard"]["token"] == REDACTED and TOKEN not in str(body)
        # the redacted value round-trips without being taken as a change
        reply = client.post("/api/config", json=body["config"], headers=AUTH).json()
        assert reply["ok"] and reply["applied"] == [] and reply["restart"] == []
        assert cache.config.dashboard.token == TOKEN


@pytest.mark.parametrize("headers, status", [({}, 401), ({"X-Lifeboat-Token": "wrong-token-xxxxxxxxxxxx"}, 403),
                                             ({"Authorization": "Bearer nope"}, 403)])
def test_config_write_without_the_token_is_refused(client: TestClient, cache: TieredCache,
                                                   headers: dict[str, str], status: int) -> None:
    config = client.get("/api/config").json()["config"]
    config["tiers"][0]["capacity_gb"] = 3
    reply = client.post("/api/config", json=config, headers=headers)
    assert reply.status_code == status and "token" in reply.json()["error"]
    assert cache.all_tiers[0].capacity == 1024**3 and cache.config.tiers[0].capacity_gb == 1


@pytest.mark.parametrize("auth", [AUTH, {"Authorization": f"Bearer {TOKEN}"}])
def test_config_write_with_the_token_is_applied_live(client: TestClient, cache: TieredCache,
                                                    auth: dict[str, str]) -> None:
    config = client.get("/api/config").json()["config"]
    config["tiers"][0]["capacity_gb"] = 3
    config["tiers"].insert(0, {"name": "ram", "backend": "dram", "capacity_gb": 0.25})
    reply = client.post("/api/config", json=config, headers=auth)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert "tier nvme: capacity 1 GB -> 3 GB" in body["applied"] and body["restart"] == []
    assert [t.name for t in cache.all_tiers] == ["ram", "nvme"] and cache.all_tiers[1].capacity == 3 * 1024**3
    assert client.get("/api/config").json()["config"]["tiers"][1]["capacity_gb"] == 3
    assert any("capacity" in e["message"] for e in client.get("/api/stats").json()["events"])


def test_validation_errors_name_each_field(client: TestClient, cache: TieredCache) -> None:
    config = client.get("/api/config").json()["config"]
    config["tiers"][0]["capacity_gb"] = -1
    config["tiers"][0]["write"] = "sideways"
    config["promote"] = "maybe"
    reply = client.post("/api/config/validate", json=config)
    assert reply.status_code == 422
    errors = {e["loc"]: e["msg"] for e in reply.json()["errors"]}
    assert errors["tiers.0.capacity_gb"] == "Input should be greater than 0"
    assert "'through' or 'back'" in errors["tiers.0.write"]
    assert "promote" in errors
    # the same body with the token is refused with the same errors, and nothing changes
    reply = client.post("/api/config", json=config, headers=AUTH)
    assert reply.status_code == 422 and len(reply.json()["errors"]) == 3
    assert cache.config.tiers[0].capacity_gb == 1


def test_plugins_only_by_registered_name(client: TestClient) -> None:
    config = client.get("/api/config").json()["config"]
    config["tiers"][0]["backend"] = "os:system"
    config["tiers"][0]["policy"] = "builtins.eval"
    errors = client.post("/api/config/validate", json=config).json()["errors"]
    assert errors[0]["loc"] == "tiers.0" and "unknown backend 'os:system'" in errors[0]["msg"]
    config = client.get("/api/config").json()["config"]
    config["surprise"] = 1
    (error,) = client.post("/api/config/validate", json=config).json()["errors"]
    assert error["loc"] == "surprise" and error["msg"].startswith("unknown key; valid keys: dashboard")


def test_restart_only_changes_are_said_so(client: TestClient, tmp_path: Path) -> None:
    config = client.get("/api/config").json()["config"]
    config["tiers"][0]["path"] = str(tmp_path / "moved")
    config["dashboard"]["port"] = 9555
    body = client.post("/api/config", json=config, headers=AUTH).json()
    assert body["ok"] and len(body["restart"]) == 2
    assert "needs a restart" in body["restart"][0] and body["restart"][1].startswith("dashboard:")
    assert client.get("/api/config").json()["restart_pending"] == body["restart"]


def test_bad_bodies(client: TestClient) -> None:
    assert client.post("/api/config/validate", content=b"{not json").status_code == 400
    assert client.post("/api/config/validate", json=[1, 2]).status_code == 422
    big = b'{"x": "' + b"a" * (1 << 20) + b'"}'
    assert client.post("/api/config", content=big, headers=AUTH).status_code == 413


def test_foreign_host_header_is_refused(cache: TieredCache) -> None:
    app = create_app(cache, token=TOKEN, allowed_hosts=["127.0.0.1", "localhost"])
    assert TestClient(app, base_url="http://attacker.example").get("/api/config").status_code == 400
    assert TestClient(app, base_url="http://localhost:9400").get("/api/config").status_code == 200


def test_short_token_is_rejected(cache: TieredCache) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        create_app(cache, token="short")
