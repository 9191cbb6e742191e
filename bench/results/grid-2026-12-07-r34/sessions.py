"""Per session and turn: prompt tokens from cache in every run of each column of a grid cell.

Rows where every run of one column got fewer than every run of the other end in "<<".

    .venv/bin/python bench/results/grid-2026-12-07-r34/sessions.py bench/results/grid-2026-12-07-r33/r33-a8-bounded
"""

import glob
import json
import os
import sys

columns: dict[str, list[dict]] = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/requests/*.jsonl")):
    column = os.path.basename(path).split("_dram")[0]
    columns.setdefault(column, []).append({(r["session_id"], r["turn"]): r for r in map(json.loads, open(path))})
first, second = sorted(columns)
print(f"session turn prompt | {first} per run | {second} per run")
for key in sorted(columns[first][0], key=lambda k: (k[1], k[0])):
    a = [run[key]["cached_tokens"] for run in columns[first]]
    b = [run[key]["cached_tokens"] for run in columns[second]]
    apart = "  <<" if max(a) < min(b) or min(a) > max(b) else ""
    print(key[0], key[1], columns[first][0][key]["prompt_tokens"], "|", a, "|", b, apart)
