"""Summarise py-spy raw (folded) profiles: samples per thread, the main thread by activity, its hottest leaves."""
import collections
import re
import sys

CATEGORIES = (("lifeboatcache", "ours"), ("execute_model", "model"), ("sample_tokens", "model"),
              ("schedule (", "schedule"), ("update_from_output", "update"), ("_process_input_queue", "idle/input"),
              ("get_finished", "kvfinished"), ("kv_offload", "offload-other"))


def load(path: str) -> list[tuple[list[str], int]]:
    rows = []
    with open(path) as fh:
        for line in fh:
            stack, _, n = line.rstrip().rpartition(" ")
            rows.append((stack.split(";"), int(n)))
    return rows


for path in sys.argv[1:]:
    rows = load(path)
    threads: collections.Counter[str] = collections.Counter()
    main: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for frames, n in rows:
        name = re.sub(r"\d+", "#", re.sub(r"\(\d+\)", "", frames[0]))
        threads[name] += n
        if "MainThread" in frames[0]:
            joined = ";".join(frames)
            category = next((c for pattern, c in CATEGORIES if pattern in joined), "other")
            main[category] += n
            leaves[frames[-1][:110]] += n
    print("==", path, "samples", sum(n for _, n in rows))
    print(" threads", threads.most_common(8))
    print(" main", main.most_common())
    print(" main leaves", leaves.most_common(12))
