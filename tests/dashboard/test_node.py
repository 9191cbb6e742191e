"""start_dashboard over real sockets: serving, a busy port, one endpoint for several processes."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lifeboatcache.dashboard import start_dashboard
from lifeboatcache.dashboard.metrics_node import ENV_SPOOL, read_node_samples
from lifeboatcache_core import dashboard_hook

from .helpers import TOKEN, open_cache, traffic


def fetch(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} missing from /metrics")


@pytest.fixture(autouse=True)
def _private_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    spool = tmp_path / "spool"
    monkeypatch.setenv(ENV_SPOOL, str(spool))
    return spool


def test_serves_on_loopback_and_prints_a_generated_token_once(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with open_cache(tmp_path) as cache:
        handle = start_dashboard(cache, port=0)
        try:
            assert handle.wait_serving(15), handle.failed
            assert handle.host == "127.0.0.1" and handle.port > 0
            printed = capsys.readouterr().err
            assert printed.count(handle.token) == 1 and len(handle.token) >= 24
            traffic(cache, stored=3, looked_up=4)
            status, text = fetch(f"{handle.url}metrics")
            assert status == 200 and metric(text, "lifeboatcache_lookup_hit_blocks_total") == 3
            config = json.loads(fetch(f"{handle.url}api/config")[1])["config"]
            config["tiers"][0]["capacity_gb"] = 2
            body = json.dumps(config).encode()
            assert fetch(f"{handle.url}api/config", body, {"Content-Type": "application/json"})[0] == 401
            status, reply = fetch(f"{handle.url}api/config", body, {"X-Lifeboat-Token": handle.token})
            assert status == 200 and json.loads(reply)["applied"] == ["tier nvme: capacity 1 GB -> 2 GB"]
            assert cache.all_tiers[0].capacity == 2 * 1024**3
        finally:
            handle.stop()
        assert not handle.serving.is_set()
        with pytest.raises(OSError):
            fetch(f"{handle.url}metrics")


def test_busy_port_is_one_log_line_and_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with open_cache(tmp_path, dashboard={"token": TOKEN}) as cache, \
                caplog.at_level(logging.WARNING, logger="lifeboatcache.dashboard"):
            handle = start_dashboard(cache, port=port)
            try:
                assert not handle.wait_serving(1.0)
                time.sleep(0.2)
                lines = [r.getMessage() for r in caplog.records if "is taken" in r.getMessage()]
                assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0]
                # meanwhile this process spools its metrics for whoever serves the node
                assert any(p.name == f"{os.getpid()}.json" for p in Path(os.environ[ENV_SPOOL]).iterdir())
            finally:
                handle.stop()
    finally:
        holder.close()


def test_hook_respects_disable_and_finds_the_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_cache(tmp_path, dashboard={"enabled": False}) as cache:
        assert dashboard_hook.start_dashboard(cache) is None
    with open_cache(tmp_path, dashboard={"token": TOKEN}) as cache:
        monkeypatch.setenv(dashboard_hook.ENV_DASHBOARD, "0")
        assert dashboard_hook.start_dashboard(cache, port=0) is None
        monkeypatch.delenv(dashboard_hook.ENV_DASHBOARD)
        handle = dashboard_hook.start_dashboard(cache, port=0)
        try:
            assert handle is not None and handle.wait_serving(15) and handle.token == TOKEN
        finally:
            handle.stop()


ENGINE_PROCESS = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.config import load_config_dict
    from lifeboatcache_core.keys import BlockKey
    from lifeboatcache.dashboard.metrics_node import SamplePublisher
    root = Path(sys.argv[1])
    cfg = load_config_dict({"tiers": [
        {"name": "ram", "backend": "dram", "capacity_gb": 1},
        {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(root / "tier")}],
        "fallback_local": {"path": str(root / "fallback")}})
    cache = TieredCache(cfg, background_index=False)
    keys = [BlockKey("dashns", (1000 + i).to_bytes(8, "big") * 4) for i in range(5)]
    cache.put(keys, [os.urandom(4096) for _ in keys])
    cache.get(keys, [bytearray(4096) for _ in keys])
    SamplePublisher(interval_s=0.1).start()
    print("ready", flush=True)
    time.sleep(120)
""")


def test_one_endpoint_serves_every_engine_process_of_the_node(tmp_path: Path) -> None:
    spool = Path(os.environ[ENV_SPOOL])
    other = subprocess.Popen([sys.executable, "-c", ENGINE_PROCESS, str(tmp_path / "other")],
                             stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while not read_node_samples(spool) and time.monotonic() < deadline:
            time.sleep(0.05)
        tiers = [{"name": "ram", "backend": "dram", "capacity_gb": 1},
                 {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tmp_path / "tier")}]
        with open_cache(tmp_path, tiers=tiers, dashboard={"token": TOKEN}) as cache:
            traffic(cache, stored=3, looked_up=4)
            handle = start_dashboard(cache, port=0)
            try:
                assert handle.wait_serving(15), handle.failed
                text = fetch(f"{handle.url}metrics")[1]
                assert metric(text, "lifeboatcache_lookup_blocks_total") == 4 + 5
                assert metric(text, "lifeboatcache_lookup_hit_blocks_total") == 3 + 5
                assert metric(text, 'lifeboatcache_puts_total{tier="ram"}') == 3 + 5
                assert metric(text, 'lifeboatcache_blocks{tier="ram"}') == 3 + 5  # process-private: summed
                assert json.loads(fetch(f"{handle.url}api/stats")[1])["processes"] == 2
                # the other engine exits: its numbers leave the node's view and its file is cleaned up
                other.kill()
                other.wait(10)
                text = fetch(f"{handle.url}metrics")[1]
                assert metric(text, "lifeboatcache_lookup_blocks_total") == 4
                assert not (spool / f"{other.pid}.json").exists()
            finally:
                handle.stop()
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(10)


def test_spool_skips_other_formats_stale_and_dead_processes(tmp_path: Path) -> None:
    from lifeboatcache.dashboard.metrics_node import SAMPLE_FORMAT, write_sample

    spool = tmp_path / "own-spool"
    sample = {"tiers": {}, "cache": {}, "job_latency": {}}
    write_sample(spool, sample, pid=os.getppid())
    assert read_node_samples(spool) == [sample]
    record = json.loads((spool / f"{os.getppid()}.json").read_text())
    (spool / f"{os.getppid()}.json").write_text(json.dumps({**record, "format": SAMPLE_FORMAT + 1}))
    assert read_node_samples(spool) == []
    (spool / f"{os.getppid()}.json").write_text(json.dumps({**record, "written_at": time.time() - 600}))
    assert read_node_samples(spool) == []
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    write_sample(spool, sample, pid=dead.pid)
    assert read_node_samples(spool) == [] and not (spool / f"{dead.pid}.json").exists()


def test_two_publishers_of_one_process_never_trip_over_each_others_spool_file(tmp_path: Path) -> None:
    """Two caches opened with a dashboard each in one process: their publishers write the same
    ``<pid>.json``. Each writes its own partial file, so neither renames a partial the other already
    moved (FileNotFoundError, and the spool warned off; seen in tests/adapters/vllm)."""
    from concurrent.futures import ThreadPoolExecutor

    from lifeboatcache.dashboard.metrics_node import write_sample

    spool = tmp_path / "spool"
    sample = {"tiers": {}, "cache": {}, "job_latency": {}}

    def publish(_writer: int) -> None:
        for _ in range(1500):
            write_sample(spool, sample)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(publish, range(3)))  # an OSError in any writer raises here
    assert json.loads((spool / f"{os.getpid()}.json").read_text())["sample"] == sample
    assert [p.name for p in spool.iterdir()] == [f"{os.getpid()}.json"]  # no partial file left
