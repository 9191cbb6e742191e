"""The soak benchmark, bounded: a ~25 s replay of real traces through the CLI, and its pass rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lifeboatcache.bench.soak import Workload, checks
from lifeboatcache.traces import load_traces


def test_short_soak_replays_traces_with_eviction_and_no_errors(tmp_path: Path, traces_dir: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "lifeboatcache", "bench", "soak", "--minutes", "0.4", "--interval", "6",
         "--limit", "10", "--concurrency", "6", "--traces", str(traces_dir), "--path", str(tmp_path),
         "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    result = json.loads(out.read_text())
    # the exit code follows the ±3-point rule, which 6 s intervals on a shared box do not promise
    assert proc.returncode in (0, 1), proc.stderr
    intervals = result["intervals"]
    assert len(intervals) >= 3
    assert result["checks"]["errors"] == 0
    assert all(i["errors"] == 0 for i in intervals)
    assert sum(i["evictions"] for i in intervals) > 0, "the tier is 5% of the working set: eviction must run"
    assert result["stored_bytes_at_end"] <= result["capacity_bytes"]
    assert result["stored_blocks_at_end"] <= result["capacity_blocks"]
    assert 0 < result["capacity_blocks"] <= 0.051 * result["working_set_blocks"]
    assert all(i["rss_mb"] > 0 and i["requests"] > 0 for i in intervals)
    assert any(i["hit_rate"] and i["hit_rate"] > 0.3 for i in intervals), "agent prompts reuse their prefix"
    assert all(i["get_p99_ms"] is None or i["get_p99_ms"] > 0 for i in intervals)
    assert not list(tmp_path.glob("lifeboat-soak-*")), "the temporary tier is removed"


def _interval(rate: float, rss: float, errors: int = 0) -> dict:
    return {"hit_rate": rate, "rss_mb": rss, "errors": errors}


def test_checks_pass_a_steady_run_and_fail_drift_growth_and_errors() -> None:
    steady = [_interval(0.5, 100)] + [_interval(0.80 + 0.01 * (i % 3), 200 + i * 0.1) for i in range(10)]
    assert checks(steady)["passed"]
    sliding = [_interval(0.5, 100)] + [_interval(0.91 - 0.04 * i, 200) for i in range(10)]
    assert not checks(sliding)["passed"]
    assert checks(sliding)["hit_rate_max_deviation_points"] > 3
    assert checks(sliding)["hit_rate_trend_points_per_10_intervals"] < -30
    assert abs(checks(steady)["hit_rate_trend_points_per_10_intervals"]) < 3
    leaking = [_interval(0.5, 100)] + [_interval(0.8, 200 + 2 * i) for i in range(10)]
    assert checks(leaking)["rss_growth_pct"] > 5 and not checks(leaking)["passed"]
    broken = [*steady[:-1], _interval(0.8, 201, errors=1)]
    assert not checks(broken)["passed"]
    assert not checks([_interval(0.8, 100)])["passed"], "nothing after warm-up is not a pass"


def test_workload_starts_each_conversation_once_per_epoch_in_a_fresh_shuffle(traces_dir: Path) -> None:
    workload = Workload(load_traces(traces_dir, 8), concurrency=3, seed=0)
    n = len(workload.requests)
    starts = [(conv, epoch) for conv, epoch, _ in workload.live]  # the first 3, started with the workload
    starts += [(conv, epoch) for conv, epoch, _ in (workload._start() for _ in range(3 * n - 3))]
    by_epoch: dict[int, list[int]] = {}
    for conv, epoch in starts:
        by_epoch.setdefault(epoch, []).append(conv)
    assert sorted(by_epoch) == [0, 1, 2]
    assert all(sorted(order) == list(range(n)) for order in by_epoch.values()), "each conversation once per epoch"
    assert len({tuple(order) for order in by_epoch.values()}) == 3, "each epoch has its own shuffle"
    assert list(range(n)) not in by_epoch.values(), "not the file order"
