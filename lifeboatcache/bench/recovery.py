"""``lifeboatcache bench recovery``: how fast a restarted process serves from a big file tier.

A tier of N small blocks is prepared once (kept for reuse under ``--path``); then a fresh
process opens it with a cold page cache and reports ``first_hit_s`` (open → first block
served: the tier serves by direct reads while it recovers), ``full_index_s`` (open → every
block indexed: the manifest loaded) and ``reconciled_s`` (open → the background check of the
manifest against the files finished).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import typer
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import default_cache_dir, load_config_dict
from lifeboatcache_core.keys import BlockKey
from rich.progress import Progress

from lifeboatcache.bench import engine_like_key

NAMESPACE = "recoverybench"
BATCH = 8192


def bench_key(i: int) -> BlockKey:
    return engine_like_key(NAMESPACE, i)


def _config(tier_dir: Path, blocks: int, block_bytes: int) -> dict[str, object]:
    return {
        "tiers": [{"name": "nvme", "backend": "file", "path": str(tier_dir),
                   "capacity_gb": blocks * (block_bytes + 4096) * 1.2 / 1024**3 + 0.01}],
        "fallback_local": {"enabled": False},
    }


def prepare(tier_dir: Path, blocks: int, block_bytes: int, show_progress: bool = True) -> None:
    """Write ``blocks`` blocks unless a previous run left exactly that tier behind."""
    marker = tier_dir / f".prepared-{blocks}x{block_bytes}"
    if marker.exists():
        return
    config = load_config_dict(_config(tier_dir, blocks, block_bytes))
    payload = np.random.default_rng(0).integers(0, 255, block_bytes, dtype=np.uint8).tobytes()
    with TieredCache(config, background_index=False) as cache, Progress(disable=not show_progress) as bar:
        task = bar.add_task(f"writing {blocks} blocks of {block_bytes} B", total=blocks)
        for start in range(0, blocks, BATCH):
            n = min(BATCH, blocks - start)
            ok = cache.put([bench_key(i) for i in range(start, start + n)], [payload] * n)
            if not all(ok):
                raise RuntimeError(f"preparing the tier failed: {cache.health()}")
            bar.update(task, advance=n)
        assert cache.tiers[0].manifest is not None
        cache.tiers[0].manifest.flush(600)
    marker.touch()


def measure(tier_dir: Path, blocks: int, block_bytes: int) -> dict[str, float | int]:
    """Run in a fresh process: open, time the first hit and the complete index."""
    config = load_config_dict(_config(tier_dir, blocks, block_bytes))
    probe = bench_key(blocks - 1)
    dest = bytearray(block_bytes)
    t0 = time.perf_counter()
    cache = TieredCache(config)
    try:
        while cache.get([probe], [dest]) != [True]:
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("no hit within 120 s")
        first_hit = time.perf_counter() - t0
        if not cache.wait_ready(600):
            raise RuntimeError("index not complete within 600 s")
        full_index = time.perf_counter() - t0
        name = cache.tiers[0].name
        tier = cache.sample().tier(name)
        while tier.recovery["phase"] not in ("done", "failed") and time.perf_counter() - t0 < 900:
            time.sleep(0.05)
            tier = cache.sample().tier(name)
        reconciled = time.perf_counter() - t0
        return {"first_hit_s": round(first_hit, 4), "full_index_s": round(full_index, 3),
                "reconciled_s": round(reconciled, 3), "indexed_blocks": tier.blocks,
                "manifest_rows": tier.recovery["manifest_rows"], "listed_files": tier.recovery["listed"],
                "added_from_files": tier.recovery["added_from_files"]}
    finally:
        cache.close()


def _drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def run(blocks: int, block_bytes: int, path: Path | None, show_progress: bool = True) -> dict[str, object]:
    tier_dir = (path or default_cache_dir() / "bench") / f"recovery-{blocks}x{block_bytes}"
    prepare(tier_dir, blocks, block_bytes, show_progress)
    cold = _drop_page_cache()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "lifeboatcache.bench.recovery", str(tier_dir), str(blocks),
                           str(block_bytes)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"recovery process failed:\n{proc.stderr}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result.update(blocks=blocks, block_bytes=block_bytes, cold_page_cache=cold,
                  process_wall_s=round(time.perf_counter() - started, 3), cpus=os.cpu_count(),
                  load_avg_1m=round(os.getloadavg()[0], 2))
    return result


def register(app: typer.Typer) -> None:
    @app.command("recovery")
    def recovery(
        blocks: int = typer.Option(100_000, "--blocks", help="Blocks in the tier."),
        block_bytes: int = typer.Option(4096, "--block-bytes", help="Payload bytes per block."),
        path: Path | None = typer.Option(None, "--path", help="Where to keep the prepared tier."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Restart recovery: time to the first hit and to a complete index, in a fresh process."""
        result = run(blocks, block_bytes, path, show_progress=not as_json)
        typer.echo(json.dumps(result) if as_json else
                   f"{blocks} blocks: first hit after {result['first_hit_s']} s, "
                   f"full index after {result['full_index_s']} s")


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
