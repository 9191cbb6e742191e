"""The guard's GAP_FACTOR again, once the replay marks a request's chain used when it comes in (as vLLM's tier
does since 42ab90d, ``LifeboatTier._mark_asked``): per fold, the factor best on the other four folds (pooled over
sizes) against the default x1.5 on the held-out fold; and x1.5 against the replay before the change (the rows
``gap_factor_folds.py`` logged then, same folds and sizes).

    .venv/bin/python bench/results/traces-2026-12-07-compute/gap_factor_folds.py 0.02,0.05,0.1 1,1.5,2,3 ends \\
        > bench/results/traces-2026-12-07-asked/gap-factor-folds-asked.log
    .venv/bin/python bench/results/traces-2026-12-07-asked/compare.py \\
        bench/results/traces-2026-12-07-asked/gap-factor-folds-asked.log \\
        bench/results/traces-2026-12-07-compute/gap-factor-folds.log
"""

import json
import sys


def rows(path: str) -> dict[tuple[str, int, float], float]:
    out = {}
    for line in open(path):
        row = json.loads(line)
        if "candidate" in row:
            out[row["candidate"], row["fold"], row["frac"]] = row["hit_frac"]
    return out


new, old = rows(sys.argv[1]), rows(sys.argv[2])
folds = sorted({f for _, f, _ in new})
sizes = sorted({s for _, _, s in new})
names = sorted({n for n, _, _ in new})
for fold in folds:
    pick = max(names, key=lambda n: sum(new[n, o, s] for o in folds if o != fold for s in sizes))
    got = sum(new[pick, fold, s] for s in sizes)
    default = sum(new["ends x1.5", fold, s] for s in sizes)
    before = sum(old["ends x1.5", fold, s] for s in sizes)
    print(json.dumps({"held_out": fold, "picked": pick, "vs_default_x1.5": round(got / default - 1, 4),
                      "x1.5_asked_vs_before": round(default / before - 1, 4)}))
print(json.dumps({"mean_by_candidate": {n: round(sum(new[n, f, s] for f in folds for s in sizes)
                                                 / (len(folds) * len(sizes)), 4) for n in names},
                  "x1.5_before": round(sum(old["ends x1.5", f, s] for f in folds for s in sizes)
                                       / (len(folds) * len(sizes)), 4)}))
