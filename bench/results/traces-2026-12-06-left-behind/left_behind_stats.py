"""How often a block a session's next request left out comes back (issue 17, EpiCache ``stale_first``).

For every session (main agent or sub-agent stream) of the traces, and each pair of its
consecutive requests k, k+1: the blocks of request k that request k+1 does not contain
("left behind"), and of those, how many any later request of the same session, or of any
session, contains again. Run from the repository root:

    .venv/bin/python bench/results/traces-2026-12-06-left-behind/left_behind_stats.py [TRACES_DIR]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.workload import load_workload

workload = load_workload(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_TRACES, seed=0)
last_request: dict[int, int] = {}  # block -> index (replay order) of the latest request containing it
for n, blocks in enumerate(workload.blocks):
    for b in blocks:
        last_request[b] = n
by_stream: dict[str, list[int]] = defaultdict(list)
for n, stream in enumerate(workload.streams):
    by_stream[stream].append(n)
left = back_same = back_any = 0
for requests in by_stream.values():
    last_here: dict[int, int] = {}  # block -> the session's latest request (its position) containing it
    for pos, n in enumerate(requests):
        for b in workload.blocks[n]:
            last_here[b] = pos
    for pos in range(len(requests) - 1):
        k, k_next = requests[pos], requests[pos + 1]
        gone = set(workload.blocks[k]).difference(workload.blocks[k_next])
        left += len(gone)
        back_same += sum(1 for b in gone if last_here[b] > pos + 1)
        back_any += sum(1 for b in gone if last_request[b] > k_next)
print(json.dumps({"sessions": len(by_stream), "requests": len(workload.blocks), "left_behind": left,
                  "back_in_same_session": back_same, "back_in_any_session": back_any,
                  "share_back_same": round(back_same / max(left, 1), 4),
                  "share_back_any": round(back_any / max(left, 1), 4)}))
