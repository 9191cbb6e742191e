"""Trace `bench staging` (hints, staging on) per block: where each session's blocks are, every 10 ms.

The tool that found stop 53's three causes of late arrivals. Replays the same schedule as `bench
staging` on its own moto server and shaped proxy, and writes OUT.json: per load (session, chunks,
how many were in DRAM / file / S3 only at the lookup, ms, the hint before it) and OUT.events.json:
(seconds, session, what) with what = "ARRIVE ...", "HINT eta=..." or a string of one digit per
block of the session's latest prompt, 4 * in DRAM + 2 * in the file tier + 1 * in S3, written
whenever it changes. Prints the slowest loads and the tiers' counters.

usage: .venv/bin/python trace_blocks.py OUT [TRACES_DIR]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import lifeboatcache.bench.staging as bench


def traced_replay(turns: list[bench.Turn], config: Any, *, block_bytes: int, staging: bool, hints: bool = True,
                  stop: threading.Event | None = None) -> dict[str, Any]:
    """`bench.replay`'s schedule, with every lookup and every change of a block's tiers recorded."""
    from lifeboatcache_core.abc import BlockHint
    from lifeboatcache_core.cache import TieredCache

    payload = os.urandom(block_bytes)
    loads: list[dict[str, Any]] = []
    events: list[tuple[float, str, str]] = []
    latest: dict[str, list[Any]] = {}
    done = threading.Event()
    with TieredCache(config, background_index=False) as cache:
        dram, file, s3 = cache.all_tiers
        started = time.perf_counter()

        def clock() -> float:
            return round(time.perf_counter() - started, 3)

        def watch() -> None:
            seen: dict[str, str] = {}
            while not done.wait(0.01):
                for session, keys in list(latest.items()):
                    where = "".join(str(4 * (dram.presence(k) is True) + 2 * (file.presence(k) is True)
                                        + (s3.presence(k) is True)) for k in keys)
                    if seen.get(session) != where:
                        seen[session] = where
                        events.append((clock(), session, where))

        threading.Thread(target=watch, daemon=True).start()
        hinted: dict[str, tuple[float, float]] = {}
        for turn in turns:
            delay = turn.at - (time.perf_counter() - started)
            if delay > 0:
                time.sleep(delay)
            keys = [bench._key(c) for c in turn.chunks]
            present = cache.presence(keys)
            lead = next((i for i, p in enumerate(present) if p is not True), len(keys))
            tiers = ["D" if dram.presence(k) is True else "F" if file.presence(k) is True else "S" for k in keys[:lead]]
            seconds, hit = None, 0
            if lead:
                t0 = time.perf_counter()
                ok = cache.get(keys[:lead], [bytearray(block_bytes) for _ in range(lead)])
                seconds = time.perf_counter() - t0
                hit = next((i for i, h in enumerate(ok) if not h), lead)
            hint = hinted.get(turn.session)
            loads.append({"at": round(turn.at, 3), "session": turn.session, "chunks": len(keys), "lead": lead,
                          "dram": tiers.count("D"), "file": tiers.count("F"), "s3": tiers.count("S"),
                          "ms": None if seconds is None else round(seconds * 1000, 2),
                          "hint_at": None if hint is None else round(hint[0], 3),
                          "eta_s": None if hint is None else round(hint[1], 3)})
            latest[turn.session] = keys
            events.append((clock(), turn.session, f"ARRIVE lead={lead} ms={loads[-1]['ms']}"))
            new = keys[hit:]
            if new:
                cache.submit_put(new, [payload] * len(new), hints=[
                    BlockHint(tag=turn.session, parent=keys[hit + i - 1] if hit + i else None, depth=hit + i)
                    for i in range(len(new))])
            list(cache.poll())
            if turn.next_at is None:
                cache.release(turn.session)
            else:
                now = time.perf_counter() - started
                hinted[turn.session] = (now, max(0.0, turn.next_at - now))
                cache.stage(turn.session, hinted[turn.session][1])
                events.append((clock(), turn.session, f"HINT eta={hinted[turn.session][1]:.3f}"))
        time.sleep(1.0)
        done.set()
        sample = cache.sample()
        counters = {"cache": dict(sample.counters), **{t.name: dict(t.counters) for t in sample.tiers}}
    return {"loads": loads, "events": events, "counters": counters}


def main() -> None:
    out = Path(sys.argv[1])
    traces = Path(sys.argv[2]) if len(sys.argv) > 2 else bench.DEFAULT_TRACES
    turns = bench.build_turns(traces, limit=10, requests=120, chunk_blocks=32, duration_s=90.0, max_gap_s=300.0,
                              seed=0)
    block_bytes = 32 * 1024
    unit = bench.session_chunks(turns)
    dram_bytes = max(1, int(2.0 * unit)) * (block_bytes + 4096) + 8192  # as run_staging_bench sizes them
    file_bytes = max(1, int(4.0 * unit)) * (block_bytes + 8192) + 16384
    result: dict[str, Any] = {}
    bench.replay = lambda *args, **kw: result.update(traced_replay(*args, **kw)) or {}  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as work:
        bench._replay_on_own_s3(turns, Path(work) / "on", staging=True, estimate=False, block_bytes=block_bytes,
                                dram_bytes=dram_bytes, file_bytes=file_bytes, latency_ms=20.0, mb_s=200.0)
    out.with_suffix(".json").write_text(json.dumps(result["loads"]))
    out.with_suffix(".events.json").write_text(json.dumps(result["events"]))
    for load in sorted((x for x in result["loads"] if x["ms"] is not None), key=lambda x: -x["ms"])[:10]:
        print(load)
    print(json.dumps(result["counters"]))


if __name__ == "__main__":
    main()
