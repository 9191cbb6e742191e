"""The dashboard benchmark runs end to end (tiny sizes; the real figures come from `lifeboatcache bench`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifeboatcache.bench.dashboard import run_bench
from lifeboatcache.dashboard.metrics_node import ENV_SPOOL


def test_bench_dashboard_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SPOOL, str(tmp_path / "spool"))
    result = run_bench(tiers=3, blocks=3000, requests=3, browser_seconds=0)
    assert result["sides"]["empty"]["indexed_blocks"] == 0
    assert result["sides"]["indexed"]["indexed_blocks"] == 3000
    for side in result["sides"].values():
        for path in ("/metrics", "/api/stats"):
            assert 0 < side[path]["p50_ms"] <= side[path]["p99_ms"] <= side[path]["max_ms"]
    assert set(result["ratio_p99_indexed_over_empty"]) == {"/metrics", "/api/stats"}
