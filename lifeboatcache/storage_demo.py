"""The storage-only demo: sessions' KV blocks survive a full process restart.

A writer process stores the blocks of a few agent sessions through a DRAM + file
TieredCache and exits; a fresh reader process opens the same tier and asks for every
session's prefix back. Nothing is shared between the two processes but the tier directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import Namespace
from rich.console import Console
from rich.table import Table

BLOCK_BYTES = 64 * 1024
SESSIONS = 6
BLOCKS_PER_SESSION = 48


def _namespace() -> Namespace:
    return Namespace(engine="demo", model="synthetic", dtype="bfloat16", block_tokens=64, digest_bytes=32)


def _cache(tier_dir: Path) -> TieredCache:
    config = load_config_dict({
        "tiers": [
            {"name": "dram", "backend": "dram", "capacity_gb": 0.002},
            {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tier_dir)},
        ],
        "fallback_local": {"enabled": False},
    })
    return TieredCache(config, background_index=False)


def _session_blocks(session: int) -> tuple[list[bytes], list[np.ndarray]]:
    """Deterministic digests and KV-like payloads of one session (a prefix chain)."""
    rng = np.random.default_rng(session)
    digests, payloads = [], []
    for i in range(BLOCKS_PER_SESSION):
        digests.append(session.to_bytes(4, "big") + i.to_bytes(4, "big") + bytes(24))
        payloads.append(rng.standard_normal(BLOCK_BYTES // 4).astype(np.float32))
    return digests, payloads


def write_sessions(tier_dir: Path) -> dict[str, int]:
    ns = _namespace()
    with _cache(tier_dir) as cache:
        cache.register_namespace(ns)
        stored = 0
        for s in range(SESSIONS):
            digests, payloads = _session_blocks(s)
            stored += sum(cache.put([ns.key(d) for d in digests], payloads))
    return {"stored": stored}


def read_sessions(tier_dir: Path) -> dict[str, object]:
    ns = _namespace()
    rows = []
    with _cache(tier_dir) as cache:
        cache.register_namespace(ns)
        for s in range(SESSIONS):
            digests, payloads = _session_blocks(s)
            keys = [ns.key(d) for d in digests]
            prefix = cache.contains_prefix(keys)
            out = [np.empty_like(p) for p in payloads]
            t0 = time.perf_counter()
            hits = cache.get(keys, out)
            seconds = time.perf_counter() - t0
            exact = all(np.array_equal(a, b) for a, b, h in zip(payloads, out, hits, strict=True) if h)
            rows.append({"session": s, "blocks": len(keys), "prefix_hits": prefix, "hits": sum(hits),
                         "bytes_identical": exact, "ms": round(seconds * 1000, 2)})
        stats = cache.stats()
    return {"sessions": rows, "tier_stats": stats}


def run_demo(work: Path | None = None) -> int:
    """Write in one process, read in another; print a table; return the exit code."""
    console = Console()
    if work is None:
        with tempfile.TemporaryDirectory(prefix="lifeboat-demo-") as tmp:
            return run_demo(Path(tmp))
    tier_dir = work / "tier"
    console.print(f"[bold]lifeboatcache storage demo[/]: {SESSIONS} sessions x {BLOCKS_PER_SESSION} blocks "
                  f"of {BLOCK_BYTES // 1024} KiB, tier at {tier_dir}")
    for phase in ("write", "read"):
        proc = subprocess.run([sys.executable, "-m", "lifeboatcache.storage_demo", phase, str(tier_dir)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            console.print(f"[red]{phase} process failed[/]\n{proc.stderr}")
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if phase == "write":
            console.print(f"process 1 (pid gone now) stored {result['stored']} blocks; restarting…")
    table = Table("session", "blocks", "prefix found", "hits", "identical bytes", "read ms",
                  title="process 2: fresh process, same tier directory")
    ok = True
    for row in result["sessions"]:
        table.add_row(*(str(row[k]) for k in ("session", "blocks", "prefix_hits", "hits", "bytes_identical", "ms")))
        ok &= row["hits"] == row["blocks"] and row["bytes_identical"]
    console.print(table)
    nvme = result["tier_stats"]["nvme"]
    console.print(f"nvme tier: {nvme['hits']} hits, {nvme['corrupt_blocks']} corrupt, {nvme['blocks']} blocks stored")
    console.print("[green]every session came back after the restart[/]" if ok else "[red]blocks were lost[/]")
    return 0 if ok else 1


def _main() -> None:
    phase, tier_dir = sys.argv[1], Path(sys.argv[2])
    result = write_sessions(tier_dir) if phase == "write" else read_sessions(tier_dir)
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
