"""Which loads of `bench staging` (staging on) are not served from DRAM alone, and why: one replay, instrumented.

Runs only the staging-on replay of `lifeboatcache bench staging` (default turns and stack,
`--dram-sessions` as the first argument, default 2) and prints, for every load that found some
of its blocks outside DRAM: the session, its think time before this turn, how many other turns
arrive within a second, where its blocks were just before the get (DRAM, file tier, else S3),
the positions of those outside DRAM, and the stager's view of the session's plan at that moment
(cursor, blocks in flight, refused, queued).

usage: .venv/bin/python bench/results/staging-2026-12-06-backlog/probe_loads.py [DRAM_SESSIONS]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache

from lifeboatcache.bench import staging as bench

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces" / "kv-cache-tester"

loads: list[dict[str, Any]] = []
turn_now: dict[str, Any] = {}

original_get = TieredCache.get
original_presence = TieredCache.presence
original_replay = bench.replay


def probing_get(self: TieredCache, keys: Any, buffers: Any, *args: Any, **kwargs: Any) -> Any:
    dram, file = self.all_tiers[0], self.all_tiers[1]
    in_dram = [dram.presence(k) is True for k in keys]
    in_file = [not d and file.presence(k) is True for d, k in zip(in_dram, keys, strict=True)]
    stager = self.stager
    plan = stager._plans.get(stager._session_of.get(keys[-1], ""))
    outside = [i for i, d in enumerate(in_dram) if not d]
    started = time.perf_counter()
    result = original_get(self, keys, buffers, *args, **kwargs)
    loads.append(dict(turn_now, blocks=len(keys), ms=round((time.perf_counter() - started) * 1e3, 2),
                      file=[i for i in outside if in_file[i]], s3=[i for i in outside if not in_file[i]],
                      plan=None if plan is None else {
                          "blocks": len(plan.order), "cursor": plan.cursor, "inflight": plan.inflight,
                          "refused": [i for i in outside if keys[i] in plan.refused],
                          "queued": [i for i in outside if keys[i] in stager._queued]}))
    return result


def staging_on_only(turns: list[bench.Turn], config: Any, **kwargs: Any) -> dict[str, Any]:
    if not kwargs["staging"]:
        return {}
    position = iter(range(len(turns)))

    def presence(self: TieredCache, keys: Any) -> Any:  # the replay asks once per turn, first
        turn = turns[next(position)]
        before = [t.at for t in turns if t.session == turn.session and t.next_at == turn.at]
        turn_now.clear()
        turn_now.update(session=turn.session, at=round(turn.at, 2),
                        think_s=round(turn.at - before[0], 2) if before else None,
                        others_within_1s=sum(1 for t in turns if t.session != turn.session and abs(t.at - turn.at) < 1))
        return original_presence(self, keys)
    TieredCache.presence = presence  # type: ignore[method-assign]
    return original_replay(turns, config, **kwargs)


def main() -> None:
    dram_sessions = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    TieredCache.get = probing_get  # type: ignore[method-assign]
    bench.replay = staging_on_only
    turns = bench.build_turns(TRACES, limit=10, requests=120, chunk_blocks=32, duration_s=90.0,
                              max_gap_s=300.0, seed=0)
    with tempfile.TemporaryDirectory(prefix="staging-probe-") as work:
        report = bench.run_staging_bench(turns, block_bytes=32 * 1024, dram_sessions=dram_sessions,
                                         file_sessions=4.0, latency_ms=20.0, mb_s=200.0, work=Path(work))
    on = report["on"]
    below = [load for load in loads if load["file"] or load["s3"]]
    print(f"dram sessions {dram_sessions}: top share {on['top_share']}, late {on['late_arrivals']}, "
          f"load p99 {on['load_p99_s'] * 1e3:.1f} ms; loads {len(loads)}, not all from DRAM: {len(below)}, "
          f"reading S3: {sum(1 for load in below if load['s3'])}")
    for load in below:
        print(load)


if __name__ == "__main__":
    main()
