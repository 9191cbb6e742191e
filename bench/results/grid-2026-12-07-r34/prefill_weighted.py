"""Wall time of each server's replay per unit of prefill it had to do, counting deep tokens dearer.

A request recomputes its prompt from its first uncached token; position p costs 1 + p/D (attention
reads every earlier token; D where that equals the rest of the forward pass). If two columns of a
cell take the same wall time per unit, the tier below costs the engine nothing beyond the prefill
its misses leave: the difference between them is which tokens hit, not overhead.

    .venv/bin/python bench/results/grid-2026-12-07-r34/prefill_weighted.py GRID_CELL_DIR...
"""

import glob
import json
import os
import sys


def prefill(start: int, end: int, d: float) -> float:
    return (end - start) + (end * (end - 1) - start * (start - 1)) / (2 * d)  # d = inf: tokens


for cell in sys.argv[1:]:
    print(cell)
    for path in sorted(glob.glob(f"{cell}/requests/*.jsonl")):
        rs = [json.loads(line) for line in open(path)]
        wall = max(r["end_s"] for r in rs) - min(r["start_s"] for r in rs)
        computed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in rs)
        per_unit = {d: wall / sum(prefill(r["cached_tokens"], r["prompt_tokens"], d) for r in rs) * 1e6
                    for d in (500, 1000, 3000, float("inf"))}
        name = os.path.basename(path).removesuffix("-server-requests.jsonl")
        print(f"  {name:40s} wall {wall:6.1f} s, {computed:7d} tokens recomputed, wall per 1e6 units at "
              + ", ".join(f"D={d}: {v:5.0f}" for d, v in per_unit.items()))
