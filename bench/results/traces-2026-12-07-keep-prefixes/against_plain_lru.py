"""Pooled gap closed of a guarded folds run (``bench traces --folds 5 --keep-prefixes``) against LRU with the guard
(the tier a user gets by default) and against plain LRU from an unguarded run of the same folds (same traces, seed
and split), for every candidate and policy:

    .venv/bin/python bench/results/traces-2026-12-07-keep-prefixes/against_plain_lru.py GUARDED.json PLAIN.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def served(path: str) -> dict[tuple[float, str, str], list[int]]:
    """(size, policy, options) -> prompt tokens not recomputed, per fold."""
    out: dict[tuple[float, str, str], list[int]] = defaultdict(list)
    for fold in json.load(open(path))["per_fold"]:
        for r in fold["results"]:
            out[(r["capacity_frac"], r["policy"], str(r["options"]))].append(
                r["tokens_from_engine"] + r["tokens_from_tiers"])
    return out


guarded, plain = served(sys.argv[1]), served(sys.argv[2])
print("size  vs guarded LRU  vs plain LRU  policy options")
for (size, policy, options), per_fold in sorted(guarded.items()):
    if policy == "belady":
        continue
    best = sum(guarded[(size, "belady", "default")])
    assert best == sum(plain[(size, "belady", "default")]), "not the same folds"
    lru_guarded, lru_plain = sum(guarded[(size, "lru", "default")]), sum(plain[(size, "lru", "default")])
    mine = sum(per_fold)
    vs_guarded, vs_plain = (mine - lru_guarded) / (best - lru_guarded), (mine - lru_plain) / (best - lru_plain)
    print(f"{size:<5} {vs_guarded:+14.3f} {vs_plain:+12.3f}  {policy} {options}")
