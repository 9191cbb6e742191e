"""``lifeboatcache bench dashboard``: scrape latency with 10 tiers and 1 M indexed blocks, page frame gaps.

Side by side in one run, over real HTTP to a started dashboard: the same 10-tier cache with
empty indexes and with ``--blocks`` index entries spread over the tiers (filled through the
tiers' index-rebuild path, no block bytes), so the ratio shows whether a scrape's cost grows
with the number of blocks. Target: ``/metrics`` p99 < 50 ms at 1 M blocks. With ``--browser``
the page is also loaded in Debian's chromium polling at 10 updates/s while cache traffic runs,
and the gaps between animation frames are reported (a responsive page stays near 16.7 ms).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import typer
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from rich.console import Console
from rich.table import Table

from lifeboatcache.dashboard import start_dashboard

TOKEN = "bench-token-not-secret-0123"
ENDPOINTS = ("/metrics", "/api/stats")


def _pcts(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))] * 1000

    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": s[-1] * 1000}


def _open(work: Path, tiers: int) -> TieredCache:
    config = {
        "tiers": [{"name": f"t{i}", "backend": "dram", "capacity_gb": 1024} for i in range(tiers)],
        "fallback_local": {"enabled": False},
        "dashboard": {"token": TOKEN},
    }
    return TieredCache(load_config_dict(config), background_index=False)


def _fill_indexes(cache: TieredCache, blocks: int) -> None:
    """Index entries only, through the path a restart's index rebuild takes."""
    per_tier = blocks // len(cache.all_tiers)
    for t, tier in enumerate(cache.all_tiers):
        batch = [(BlockKey("bench", (t << 40 | i).to_bytes(8, "big") * 4), 65_536) for i in range(per_tier)]
        tier.add_to_index(batch)


def _time_endpoints(url: str, requests: int) -> dict[str, dict[str, float]]:
    out = {}
    for path in ENDPOINTS:
        for _ in range(5):  # warm-up: first requests pay for imports and connection set-up
            with urllib.request.urlopen(url + path.lstrip("/"), timeout=30) as reply:
                reply.read()
        lat = []
        for _ in range(requests):
            started = time.perf_counter()
            with urllib.request.urlopen(url + path.lstrip("/"), timeout=30) as reply:
                reply.read()
            lat.append(time.perf_counter() - started)
        out[path] = _pcts(lat)
    return out


def _browser_frames(url: str, cache: TieredCache, seconds: float) -> dict[str, Any]:
    import shutil as _shutil

    from playwright.sync_api import sync_playwright

    stop = threading.Event()

    def load() -> None:  # steady cache traffic so every poll changes the numbers
        keys = [BlockKey("bench", (1 << 60 | i).to_bytes(8, "big") * 4) for i in range(64)]
        cache.put(keys, [bytes(4096)] * 64)
        while not stop.is_set():
            cache.get(keys, [bytearray(4096) for _ in keys])
            stop.wait(0.01)

    traffic = threading.Thread(target=load, daemon=True)
    traffic.start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_shutil.which("chromium") or "/usr/bin/chromium",
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page()
            page.goto(f"{url}?interval=100")
            page.wait_for_function("/[0-9]/.test(document.querySelector('#lookups').textContent)")
            gaps = page.evaluate("""(ms) => new Promise((done) => {
                const gaps = []; let last = performance.now(); const end = last + ms;
                let polls = 0; const status = document.querySelector('#lookups');
                new MutationObserver(() => polls++).observe(status, {childList: true, characterData: true,
                                                                     subtree: true});
                function frame(now) { gaps.push(now - last); last = now;
                    if (now < end) requestAnimationFrame(frame); else done({gaps, polls}); }
                requestAnimationFrame(frame);
            })""", int(seconds * 1000))
            browser.close()
    finally:
        stop.set()
        traffic.join(5)
    frames = sorted(gaps["gaps"])
    return {
        "seconds": seconds, "updates_seen": gaps["polls"], "frames": len(frames),
        "frame_gap_p50_ms": frames[len(frames) // 2], "frame_gap_p99_ms": frames[int(0.99 * (len(frames) - 1))],
        "frame_gap_max_ms": frames[-1],
    }


def run_bench(tiers: int, blocks: int, requests: int, browser_seconds: float) -> dict[str, Any]:
    result: dict[str, Any] = {"tiers": tiers, "blocks": blocks, "requests": requests, "sides": {}}
    work = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    try:
        for side, n in (("empty", 0), ("indexed", blocks)):
            cache = _open(work / side, tiers)
            handle = start_dashboard(cache, port=0)
            try:
                if not handle.wait_serving(15):
                    raise RuntimeError(f"dashboard did not start: {handle.failed}")
                fill_started = time.perf_counter()
                _fill_indexes(cache, n)
                indexed = sum(t.blocks for t in cache.sample().tiers)
                result["sides"][side] = {"indexed_blocks": indexed,
                                         "fill_s": time.perf_counter() - fill_started,
                                         **_time_endpoints(handle.url, requests)}
                if side == "indexed" and browser_seconds > 0:
                    result["browser"] = _browser_frames(handle.url, cache, browser_seconds)
            finally:
                handle.stop()
                cache.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    empty, full = result["sides"]["empty"], result["sides"]["indexed"]
    result["ratio_p99_indexed_over_empty"] = {p: full[p]["p99_ms"] / empty[p]["p99_ms"] for p in ENDPOINTS}
    result["metrics_p99_under_50ms"] = full["/metrics"]["p99_ms"] < 50
    return result


def _print(result: dict[str, Any]) -> None:
    table = Table("side", "blocks", "endpoint", "p50 ms", "p90 ms", "p99 ms", "max ms",
                  title=f"dashboard scrape, {result['tiers']} tiers, {result['requests']} requests each")
    for side, values in result["sides"].items():
        for path in ENDPOINTS:
            p = values[path]
            table.add_row(side, f"{values['indexed_blocks']:,}", path, f"{p['p50_ms']:.2f}", f"{p['p90_ms']:.2f}",
                          f"{p['p99_ms']:.2f}", f"{p['max_ms']:.2f}")
    console = Console()
    console.print(table)
    for path, ratio in result["ratio_p99_indexed_over_empty"].items():
        console.print(f"{path}: p99 indexed / empty = {ratio:.2f}")
    console.print(f"/metrics p99 < 50 ms with {result['blocks']:,} blocks: {result['metrics_p99_under_50ms']}")
    if "browser" in result:
        b = result["browser"]
        console.print(f"page at 10 updates/s for {b['seconds']} s: {b['updates_seen']} updates, frame gap p50 "
                      f"{b['frame_gap_p50_ms']:.1f} ms, p99 {b['frame_gap_p99_ms']:.1f} ms, "
                      f"max {b['frame_gap_max_ms']:.1f} ms")


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    def dashboard(
        tiers: int = typer.Option(10, help="Tiers in the cache."),
        blocks: int = typer.Option(1_000_000, help="Index entries spread over the tiers."),
        requests: int = typer.Option(100, help="Requests per endpoint and side."),
        browser: float = typer.Option(0.0, "--browser", help="Seconds to watch the page in chromium (0: skip)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """/metrics and /api/stats latency with empty vs filled indexes; optionally page frame gaps."""
        result = run_bench(tiers, blocks, requests, browser)
        if as_json:
            typer.echo(json.dumps(result))
        else:
            _print(result)
