"""Per request of a grid cell's servers: round, start (s from the cell's first request), TTFT, prompt, cached."""
import json
import sys
from pathlib import Path

for cell in sys.argv[1:]:
    files = sorted(Path(cell).glob("server*-requests.jsonl"))
    rows = [json.loads(line) for f in files for line in f.open()]
    t0 = min(r["start_s"] for r in rows)
    print(f"== {cell}")
    by_round = {}
    for r in rows:
        by_round.setdefault(r["turn"], []).append(r)
    for turn in sorted(by_round):
        rs = sorted(by_round[turn], key=lambda r: r["start_s"])
        mean = sum(r["ttft_s"] for r in rs) / len(rs)
        print(f"round {turn}: mean TTFT {mean:.2f}")
        for r in rs:
            print(f"   {r['session_id'][:10]:10s} start {r['start_s'] - t0:7.2f} ttft {r['ttft_s']:6.2f} "
                  f"prompt {r['prompt_tokens']:5d} cached {r['cached_tokens'] or 0:5d} "
                  f"new {r['prompt_tokens'] - (r['cached_tokens'] or 0):5d}")
