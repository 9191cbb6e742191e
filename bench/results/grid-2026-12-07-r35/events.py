"""Summarise diag/sitecustomize.py's event log (r35): how long requests wait before vLLM first asks
for them, and, for every block the prefix guard let go as idle, where its session was at that moment.

    .venv/bin/python bench/results/grid-2026-12-07-r35/events.py bench/results/grid-2026-12-07-r35/events
"""

import bisect
import collections
import glob
import json
import sys


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1)))] if xs else float("nan")


for path in sorted(glob.glob(f"{sys.argv[1]}/*.jsonl")):
    rows = [json.loads(line) for line in open(path)]
    arrive = {r["req"]: r["t"] for r in rows if r["ev"] == "arrive"}
    asks = [r for r in rows if r["ev"] == "ask"]
    ends = {r["req"]: r["t"] for r in rows if r["ev"] == "end"}
    judged = [r for r in rows if r["ev"] == "judge"]
    if not asks and not judged:
        continue
    waits = [a["t"] - arrive[a["req"]] for a in asks if a["req"] in arrive]
    print(path, f"{len(arrive)} requests, {len(asks)} asked, {len(judged)} judgements")
    print(f"  arrival to first ask s: p50 {pct(waits, .5):.1f} p90 {pct(waits, .9):.1f}",
          f"max {max(waits, default=0):.1f}")
    # digest -> times it was asked for (with the request)
    asked_at: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
    for a in asks:
        for d in a["chain"]:
            asked_at[d].append((a["t"], a["req"]))
    idle = [j for j in judged if not j["protected"] and j["victim_depth"] is not None
            and j["victim_depth"] <= j.get("depth", j["victim_depth"])]  # r36 logs no newcomer depth
    where: collections.Counter[str] = collections.Counter()
    for j in idle:
        times = asked_at.get(j["victim"], [])
        i = bisect.bisect_right(times, (j["t"], "~"))
        if i == len(times):
            where["never asked for again"] += 1
            continue
        _, req = times[i]
        if arrive.get(req, float("inf")) <= j["t"]:
            where["its next request waiting, not yet asked for"] += 1
        elif i and ends.get(times[i - 1][1], float("inf")) > j["t"]:
            where["its previous request still running"] += 1
        else:
            where["between its requests"] += 1
    print(f"  taken as idle: {len(idle)}; limit {judged[0]['limit_s'] if judged else '-'} -> "
          f"{judged[-1]['limit_s'] if judged else '-'} s")
    for kind, n in where.most_common():
        print(f"    {kind:45s} {n}")
