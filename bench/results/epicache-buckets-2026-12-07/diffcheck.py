"""Drive 2143fbc's EpiCache (a heap per episode) and the installed one (depth buckets) with the same random
operations and compare every victim and every victims() list. Usage (from the repository root):
.venv/bin/python bench/results/epicache-buckets-2026-12-07/diffcheck.py SEEDS_END [SEEDS_START]"""
import atexit
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_old = Path(tempfile.mkdtemp()) / "old_epicache.py"
atexit.register(shutil.rmtree, _old.parent)
_old.write_text(subprocess.run(["git", "show", "2143fbc:policies/epicache/src/lifeboatcache_policy_epicache/policy.py"],
                               check=True, capture_output=True, text=True).stdout)
sys.path.insert(0, str(_old.parent))
import old_epicache  # noqa: E402
from lifeboatcache_core.abc import BlockHint  # noqa: E402
from lifeboatcache_policy_epicache.policy import EpiCachePolicy  # noqa: E402

#: workloads: many short sessions that branch often; a few long ones losing blocks from their middle
SHAPES = [
    {"sessions": 12, "restart": 0.01, "branch": 0.2, "caps": [20, 50, 200, 2000], "removals": 0.05},
    {"sessions": 3, "restart": 0.001, "branch": 0.02, "caps": [300, 1000], "removals": 0.15},
]


def run(seed: int, config: dict, shape: dict) -> int:
    rng = random.Random(seed)
    t = [0.0]
    pols = [old_epicache.EpiCachePolicy(old_epicache.EpiCacheConfig(**config)),
            EpiCachePolicy(EpiCachePolicy.config_model(**config))]
    for p in pols:
        p.clock = lambda: t[0]
    held: set = set()
    chains: dict = {}  # session -> list of keys (its chain)
    cap = rng.choice(shape["caps"])
    checks = 0
    for step in range(3000):
        t[0] += rng.expovariate(1.0) * rng.choice([0.01, 0.5, 5.0])
        s = rng.randrange(shape["sessions"])
        chain = chains.setdefault(s, [])
        r = rng.random()
        if r < shape["restart"]:
            chain.clear()  # compaction: a new chain
        if r < 0.6 - shape["removals"]:
            d = len(chain) if rng.random() >= shape["branch"] else rng.randrange(len(chain) + 1)
            key = (s, step)
            parent = chain[d - 1] if d and d <= len(chain) else None
            hint = BlockHint(tag=str(s) if rng.random() < 0.5 else None, parent=parent,
                             depth=d if rng.random() < 0.9 else None)
            del chain[d:]
            chain.append(key)
            adm = [p.admit(key, 1, hint) for p in pols]
            assert adm[0] == adm[1], (seed, step, adm)
            if not adm[0]:
                continue
            while len(held) >= cap:
                v = [p.victim(key) for p in pols]
                assert v[0] == v[1], (seed, step, v)
                vs = [p.victims(key, 25) for p in pols]
                assert vs[0] == vs[1], (seed, step, vs)
                checks += 2
                for p in pols:
                    p.remove(v[0])
                held.discard(v[0])
            for p in pols:
                p.insert(key, 1, hint)
            held.add(key)
        elif r < 0.85 - shape["removals"]:
            for key in chain[: rng.randrange(len(chain) + 1)]:  # a prompt's leading blocks
                for p in pols:
                    p.touch(key)
        elif r < 0.95 - shape["removals"]:
            if chain:
                for p in pols:
                    p.request_done(chain[-1])
        elif held:  # a tier's other removals (a discard, a staging move): some blocks of this session's chain
            for key in rng.sample(chain, min(len(chain), rng.choice([1, 10]))):
                if key in held:
                    for p in pols:
                        p.remove(key)
                    held.discard(key)
    return checks


total = 0
for seed in range(int(sys.argv[2]) if len(sys.argv) > 2 else 0, int(sys.argv[1])):
    print(seed, flush=True)
    for shape in SHAPES:
        for config in ({}, {"stale_first": False}, {"warm_order": "recent"}, {"predictor": "returns"},
                       {"bypass": "off"}, {"visit_window": 0.0}):
            total += run(seed, config, shape)
print("identical victims on", total, "checks")
