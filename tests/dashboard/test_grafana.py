"""The Grafana dashboard JSON parses and only queries metric names the exporter really emits."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from prometheus_client import generate_latest

from .helpers import open_cache, traffic


def test_every_queried_metric_is_exported(tmp_path: Path) -> None:
    text = resources.files("lifeboatcache.dashboard").joinpath("grafana", "lifeboatcache.json").read_text()
    dashboard = json.loads(text)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 20 and dashboard["uid"] == "lifeboatcache"
    queried = set(re.findall(r"\blifeboatcache_[a-z_]+", " ".join(exprs)))
    with open_cache(tmp_path) as cache:
        traffic(cache, stored=2, looked_up=3)
        exported = {line.split("{")[0].split(" ")[0] for line in generate_latest().decode().splitlines()
                    if line.startswith("lifeboatcache_")}
    assert queried and queried <= exported, sorted(queried - exported)
    for family in ("hit_blocks", "bytes_served", "occupancy_ratio", "compression_ratio", "tier_up", "tier_info",
                   "index_loading", "evictions", "corrupt_blocks", "errors", "io_latency_seconds_bucket",
                   "job_latency_seconds_bucket", "lookup_tokens", "capacity_bytes", "bytes_used",
                   "staged_bytes_total", "staged_used_bytes_total", "staged_wasted_bytes_total",
                   "staged_late_arrivals_total"):
        assert any(family in name for name in queried), family
