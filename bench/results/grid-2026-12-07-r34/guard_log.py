"""Summarise diag/sitecustomize.py's guard log (r34): why each victim a full tier judged was taken or kept.

    .venv/bin/python bench/results/grid-2026-12-07-r34/guard_log.py bench/results/grid-2026-12-07-r34/guard
"""

import collections
import glob
import json
import sys

for path in sorted(glob.glob(f"{sys.argv[1]}/*.jsonl")):
    rows = [json.loads(line) for line in open(path)]
    if not rows:
        continue
    t0 = rows[0]["t"]
    why: collections.Counter[str] = collections.Counter()
    depths: dict[str, list[int]] = collections.defaultdict(list)
    for r in rows:
        if r["protected"]:
            kind = "kept (the new block declined)"
        elif r["victim_depth"] is None:
            kind = "taken: no depth"
        elif r["victim_depth"] > r["depth"]:
            kind = "taken: deeper than the new block"
        else:
            kind = "taken: idle past the limit"
        why[kind] += 1
        depths[kind].append(r["victim_depth"] if r["victim_depth"] is not None else -1)
    print(path, f"{len(rows)} judgements over {rows[-1]['t'] - t0:.0f} s; idle limit",
          f"{rows[0]['limit_s']:.0f} -> {rows[-1]['limit_s']:.0f} s")
    for kind, n in why.most_common():
        ds = sorted(depths[kind])
        p10, p50, p90 = ds[len(ds) // 10], ds[len(ds) // 2], ds[9 * len(ds) // 10]
        print(f"  {kind:34s} {n:6d}  victim depth p10/p50/p90 {p10}/{p50}/{p90}")
    taken = [r for r in rows if not r["protected"] and r["victim_depth"] is not None]
    gaps = sorted(r["victim_depth"] - r["depth"] for r in taken)
    if gaps:
        print(f"  taken: victim depth - new depth p10/p50/p90 {gaps[len(gaps) // 10]}/{gaps[len(gaps) // 2]}/"
              f"{gaps[9 * len(gaps) // 10]}; new depth p50 {sorted(r['depth'] for r in taken)[len(taken) // 2]}")
    by_minute = collections.Counter(int((r["t"] - t0) // 60) for r in taken)
    print("  taken per minute:", dict(sorted(by_minute.items())))
