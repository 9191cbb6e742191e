"""Pooled and per-fold gap closed of every candidate in a `bench traces --folds` JSON (not only the picks).

    .venv/bin/python bench/results/traces-2026-12-06-deferred-ends/pooled_candidates.py FOLDS.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

data = json.load(open(sys.argv[1]))
hits: dict[tuple[float, str, str], list[int]] = defaultdict(list)
for fold in data["per_fold"]:
    for r in fold["results"]:
        served = r["tokens_from_engine"] + r["tokens_from_tiers"]
        hits[(r["capacity_frac"], r["policy"], str(r["options"]))].append(served)
for (size, policy, options), per_fold in sorted(hits.items()):
    if policy != "epicache":
        continue
    lru, best = hits[(size, "lru", "default")], hits[(size, "belady", "default")]
    pooled = (sum(per_fold) - sum(lru)) / (sum(best) - sum(lru))
    folds = [(h - lo) / (b - lo) for h, lo, b in zip(per_fold, lru, best, strict=True)]
    print(f"{size:<5} {pooled:+.3f} ({min(folds):+.2f} to {max(folds):+.2f})  {options}")
