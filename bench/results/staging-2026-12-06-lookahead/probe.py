"""Why a returning session reads from S3 with staging on: one `bench staging` replay, instrumented.

Runs only the staging-on replay of `lifeboatcache bench staging` (same turns, stack and S3 shaping,
`--dram-sessions` as the first argument, default 2) with two probes added from outside:

- every staging store (``Tier.store`` with ``evictable``) is counted by tier and outcome;
- every load records where its blocks were just before the get (DRAM, file tier, else S3).

With ``--loads`` (added 2026-12-06, stop 51) it also prints each load that found blocks outside
DRAM: the session, its think time before this turn, how many other turns arrive within a
second, the positions of the blocks in the file tier and in S3 only, the get's time, the
stager's view of the session's plan at that moment (its blocks, cursor, blocks in flight, and
which of the missing ones it holds as refused or queued), and how many staging stores of each
block read from S3 the DRAM and file tiers had declined by then.

usage: .venv/bin/python bench/results/staging-2026-12-06-lookahead/probe.py [DRAM_SESSIONS] [--loads]
(old code: PYTHONPATH=<worktree>/lifeboatcache_core/src:<worktree>)
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache

from lifeboatcache.bench import staging as bench
from lifeboatcache_core import tier as tier_module

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces" / "kv-cache-tester"

outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
loads: list[dict[str, Any]] = []
declined: collections.Counter[tuple[str, Any]] = collections.Counter()  # (tier, key): staging stores declined
turn_now: dict[str, Any] = {}  # the turn the replay is on (``--loads``)

original_store = tier_module.Tier.store


def counting_store(self: tier_module.Tier, key: Any, raw: Any, layout: Any, hint: Any, *,
                   evictable: Any = None) -> Any:
    outcome = original_store(self, key, raw, layout, hint, evictable=evictable)
    if evictable is not None:
        outcomes[(self.name, outcome.name)] += 1
        if outcome.name == "DECLINED":
            declined[(self.name, key)] += 1
    return outcome


original_get = TieredCache.get


def probing_get(self: TieredCache, keys: Any, buffers: Any, *args: Any, **kwargs: Any) -> Any:
    dram, file = self.all_tiers[0], self.all_tiers[1]
    outside = [i for i, k in enumerate(keys) if dram.presence(k) is not True]
    in_file = [i for i in outside if file.presence(keys[i]) is True]
    stager = self.stager
    plan = stager._plans.get(stager._session_of.get(keys[-1], ""))
    started = time.perf_counter()
    result = original_get(self, keys, buffers, *args, **kwargs)
    s3 = [i for i in outside if i not in in_file]
    loads.append(dict(turn_now, blocks=len(keys), dram=len(keys) - len(outside), file=len(in_file), s3=len(s3),
                      ms=round((time.perf_counter() - started) * 1e3, 2), at_file=in_file, at_s3=s3,
                      plan=None if plan is None else {
                          "blocks": len(plan.order), "cursor": plan.cursor, "inflight": plan.inflight,
                          "refused": [i for i in outside if keys[i] in plan.refused],
                          "queued": [i for i in outside if keys[i] in stager._queued]},
                      declined_so_far={i: {t.name: declined[(t.name, keys[i])] for t in (dram, file)}
                                       for i in s3}))
    return result


original_replay = bench.replay
original_presence = TieredCache.presence


def staging_on_only(turns: Any, config: Any, **kwargs: Any) -> dict[str, Any]:
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
    args = [a for a in sys.argv[1:] if a != "--loads"]
    dram_sessions = float(args[0]) if args else 2.0
    tier_module.Tier.store = counting_store  # type: ignore[method-assign]
    TieredCache.get = probing_get  # type: ignore[method-assign]
    bench.replay = staging_on_only
    turns = bench.build_turns(TRACES, limit=10, requests=120, chunk_blocks=32, duration_s=90.0,
                              max_gap_s=300.0, seed=0)
    with tempfile.TemporaryDirectory(prefix="staging-probe-") as work:
        report = bench.run_staging_bench(turns, block_bytes=32 * 1024, dram_sessions=dram_sessions,
                                         file_sessions=4.0, latency_ms=20.0, mb_s=200.0, work=Path(work))
    on = report["on"]
    print(f"dram sessions {dram_sessions}: top share {on['top_share']}, late {on['late_arrivals']}, "
          f"waste {on['waste_share']}, staged {on['staged_bytes'] / 1e6:.1f} MB, "
          f"load p99 {on['load_p99_s'] * 1e3:.1f} ms")
    for (name, outcome), count in sorted(outcomes.items()):
        print(f"staging stores into {name}: {outcome} {count}")
    from_s3 = [load for load in loads if load["s3"]]
    print(f"loads {len(loads)}, reading some blocks from S3: {len(from_s3)} "
          f"({sum(load['s3'] for load in from_s3)} blocks; of them also from the file tier: "
          f"{sum(1 for load in from_s3 if load['file'])})")
    if "--loads" in sys.argv:
        for load in loads:
            if load["dram"] < load["blocks"]:
                print(load)


if __name__ == "__main__":
    main()
