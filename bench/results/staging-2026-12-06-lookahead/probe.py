"""Why a returning session reads from S3 with staging on: one `bench staging` replay, instrumented.

Runs only the staging-on replay of `lifeboatcache bench staging` (same turns, stack and S3 shaping,
`--dram-sessions` as the first argument, default 2) with two probes added from outside:

- every staging store (``Tier.store`` with ``evictable``) is counted by tier and outcome;
- every load records where its blocks were just before the get (DRAM, file tier, else S3).

usage: .venv/bin/python bench/results/staging-2026-12-06-lookahead/probe.py [DRAM_SESSIONS]
(old code: PYTHONPATH=<worktree>/lifeboatcache_core/src:<worktree>)
"""

from __future__ import annotations

import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache

from lifeboatcache.bench import staging as bench
from lifeboatcache_core import tier as tier_module

TRACES = Path(__file__).resolve().parents[4] / "shared" / "traces" / "kv-cache-tester"

outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
loads: list[dict[str, Any]] = []

original_store = tier_module.Tier.store


def counting_store(self: tier_module.Tier, key: Any, raw: Any, layout: Any, hint: Any, *,
                   evictable: Any = None) -> Any:
    outcome = original_store(self, key, raw, layout, hint, evictable=evictable)
    if evictable is not None:
        outcomes[(self.name, outcome.name)] += 1
    return outcome


original_get = TieredCache.get


def probing_get(self: TieredCache, keys: Any, buffers: Any, *args: Any, **kwargs: Any) -> Any:
    dram, file = self.all_tiers[0], self.all_tiers[1]
    in_dram = sum(1 for k in keys if dram.presence(k) is True)
    in_file = sum(1 for k in keys if dram.presence(k) is not True and file.presence(k) is True)
    loads.append({"blocks": len(keys), "dram": in_dram, "file": in_file, "s3": len(keys) - in_dram - in_file})
    return original_get(self, keys, buffers, *args, **kwargs)


original_replay = bench.replay


def staging_on_only(turns: Any, config: Any, **kwargs: Any) -> dict[str, Any]:
    if not kwargs["staging"]:
        return {}
    return original_replay(turns, config, **kwargs)


def main() -> None:
    dram_sessions = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
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


if __name__ == "__main__":
    main()
