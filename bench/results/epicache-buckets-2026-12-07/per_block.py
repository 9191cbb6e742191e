"""Per-block policy cost against the size of one session, 2143fbc's heap against the installed depth buckets.

One tagged session holds ``b`` blocks (a chain, depths 0..b-1); each step is what a full tier does for a store:
``admit``, take the ``victim`` (the session's deepest block), ``remove`` it, ``insert`` the new block, which is the
chain's new tail (99.94 % of the stores in the 150 traces), and ``touch`` a block of the head. The two versions are
interleaved in one process, three rounds; printed: ns per step, median of the rounds. Usage (repository root):
.venv/bin/python bench/results/epicache-buckets-2026-12-07/per_block.py
"""
import atexit
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_old = Path(tempfile.mkdtemp()) / "old_epicache.py"
atexit.register(shutil.rmtree, _old.parent)
_old.write_text(subprocess.run(["git", "show", "2143fbc:policies/epicache/src/lifeboatcache_policy_epicache/policy.py"],
                               check=True, capture_output=True, text=True).stdout)
sys.path.insert(0, str(_old.parent))
import old_epicache  # noqa: E402
from lifeboatcache_core.abc import BlockHint  # noqa: E402
from lifeboatcache_core.testing.contracts import key  # noqa: E402
from lifeboatcache_policy_epicache.policy import EpiCachePolicy  # noqa: E402

STEPS = 100_000


def ns_per_step(make: type, config: type, blocks: int) -> float:
    policy = make(config(clock="operations"))
    keys = [key(depth) for depth in range(blocks + STEPS)]  # made before the clock starts: a key costs more
    hints = [BlockHint("a", None, depth) for depth in range(blocks + STEPS)]  # than a policy step
    for depth in range(blocks):
        policy.insert(keys[depth], 1, hints[depth])
    policy.victim(None)  # the tier is full from here on
    start = time.perf_counter_ns()
    for step in range(STEPS):
        new, hint = keys[blocks + step], hints[blocks + step]
        policy.admit(new, 1, hint)
        policy.remove(policy.victim(new))
        policy.insert(new, 1, hint)
        policy.touch(keys[step % 8])
    return (time.perf_counter_ns() - start) / STEPS


print("blocks in the session | heap ns/step | buckets ns/step | buckets / heap")
for blocks in (100, 1_000, 10_000, 100_000):
    heap, buckets = [], []
    for _round in range(3):
        heap.append(ns_per_step(old_epicache.EpiCachePolicy, old_epicache.EpiCacheConfig, blocks))
        buckets.append(ns_per_step(EpiCachePolicy, EpiCachePolicy.config_model, blocks))
    h, b = statistics.median(heap), statistics.median(buckets)
    print(f"{blocks:>8} | {h:.0f} ({', '.join(f'{x:.0f}' for x in heap)}) | "
          f"{b:.0f} ({', '.join(f'{x:.0f}' for x in buckets)}) | {b / h:.2f}", flush=True)
