"""The simulator drives a policy exactly as a real ``Tier`` does: same calls, same order.

One workload is replayed twice with the same recording policy: through ``sim.replay`` and
through a real ``TieredCache`` (one DRAM tier sized to hold exactly C blocks), where each
request looks up its leading run (``presence``), reads it (``get``: ``Tier.fetch``) and stores
the rest (``put``: ``Tier.store``), as an engine's offloading connector does. The recorded
policy calls (``admit``, ``insert``, ``touch``, ``victim``, ``remove`` with the block and its
hint) must be identical, and so must the per-request tier hits. With vLLM's request ends
(``request_ends``) each finished request's chain reaches the tier as
``TieredCache.touch(..., request_done=True)`` before the next request, and each request's chain
as a plain ``touch`` before its lookup, as vLLM's tier reports them.
With ``keep_prefixes`` (a tier's default) the tier's own veto on victims runs in both, the tier's
clock set to the workload's times.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import lifeboatcache_core.tier
import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.builtin.lru import LRUPolicy
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.tier import BLOCK_OVERHEAD

from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import ReplaySetup, replay_policy
from lifeboatcache.sim.workload import Workload

BLOCK = 512


class Recording(LRUPolicy):
    """LRU that logs every call, with keys mapped to the simulator's ints, and refuses some blocks."""

    def __init__(self, to_int: dict[Hashable, int] | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[object, ...]] = []
        self._int = (lambda k: to_int[k]) if to_int is not None else (lambda k: k)

    def _hint(self, hint: BlockHint | None) -> tuple[object, ...]:
        if hint is None:
            return (None,)
        parent = None if hint.parent is None else self._int(hint.parent)
        return (hint.tag, parent, hint.depth)

    def admit(self, key, size, hint=None):  # type: ignore[no-untyped-def]
        self.calls.append(("admit", self._int(key), *self._hint(hint)))
        return hint is None or hint.depth is None or hint.depth % 7 != 6  # bypass every 7th depth

    def insert(self, key, size, hint=None):  # type: ignore[no-untyped-def]
        self.calls.append(("insert", self._int(key), *self._hint(hint)))
        super().insert(key, size, hint)

    def touch(self, key):  # type: ignore[no-untyped-def]
        self.calls.append(("touch", self._int(key)))
        super().touch(key)

    def request_done(self, key):  # type: ignore[no-untyped-def]
        self.calls.append(("request_done", self._int(key)))
        LRUPolicy.touch(self, key)

    def remove(self, key):  # type: ignore[no-untyped-def]
        self.calls.append(("remove", self._int(key)))
        super().remove(key)

    def victim(self, incoming=None):  # type: ignore[no-untyped-def]
        chosen = super().victim(incoming)
        self.calls.append(("victim", self._int(incoming), None if chosen is None else self._int(chosen)))
        return chosen


def sessions_workload() -> Workload:
    """Three sessions whose prompts grow turn by turn, interleaved, plus one-off prompts."""
    prompts: list[list[int]] = []
    streams: list[str] = []
    grown = {0: [100, 101], 1: [200, 201, 202], 2: [300]}
    for turn in range(8):
        for s in (0, 1, 2):
            grown[s] = grown[s] + [1000 * (s + 1) + 10 * turn + i for i in range(1 + (turn + s) % 3)]
            prompts.append(list(grown[s]))
            streams.append(f"s{s}")
        prompts.append([9000 + 10 * turn + i for i in range(3)])
        streams.append("once")
    distinct = {b for p in prompts for b in p}
    return Workload(blocks=prompts, input_tokens=[64 * len(p) for p in prompts], streams=streams,
                    times=[5.0 * i for i in range(len(prompts))], block_tokens=64, working_set=len(distinct))


def run_real_tier(tmp_path: Path, wl: Workload, gpu_hits: list[int], capacity_blocks: int,
                  request_ends: bool = False, keep_prefixes: bool = False,
                  clock: list[float] | None = None) -> tuple[list[int], list]:
    """``clock``: the tier's ``time.monotonic`` reads it; set here to each request's and end's time."""
    clock = [0.0] if clock is None else clock
    ids = sorted({b for p in wl.blocks for b in p})
    key_of = {b: BlockKey("parity", b.to_bytes(8, "big") * 4) for b in ids}
    int_of: dict[Hashable, int] = {k: b for b, k in key_of.items()}
    config = load_config_dict({"tiers": [{"name": "ram", "backend": "dram", "capacity_gb": 1, "io_threads": 1,
                                          "keep_prefixes": keep_prefixes}],
                               "fallback_local": {"path": str(tmp_path / "fb"), "capacity_gb": 1}})
    cache = TieredCache(config, background_index=False)
    try:
        tier = cache.tiers[0]
        probe = BlockKey("parity", b"\xff" * 32)
        assert cache.put([probe], [bytes(BLOCK)]) == [True]
        stored = tier.used
        with tier.lock:
            tier._forget(probe)
        # C blocks fit, a (C+1)-th needs a victim: reserving checks used + estimate <= capacity
        tier.resize((capacity_blocks - 1) * stored + BLOCK + BLOCK_OVERHEAD)
        policy = Recording(int_of)
        with tier.lock:
            tier.policy = policy
        hits: list[int] = []
        ends = sorted((end, n) for n, end in enumerate(wl.ends or ())) if request_ends else []
        for blocks, g, tag, t in zip(wl.blocks, gpu_hits, wl.streams, wl.times, strict=True):
            while ends and ends[0][0] <= t:  # vLLM's tier: a finished request's chain, tail first
                clock[0], n = ends.pop(0)
                cache.touch([key_of[b] for b in reversed(wl.blocks[n])], request_done=True)
            clock[0] = t
            if request_ends:  # and marks a request's chain used when it is first asked for
                cache.touch([key_of[b] for b in reversed(blocks)])
            tail = [key_of[b] for b in blocks[g:]]
            run = 0
            for known in cache.presence(tail):
                if not known:
                    break
                run += 1
            if run:
                assert all(cache.get(tail[:run], [bytearray(BLOCK) for _ in range(run)]))
            hits.append(run)
            start = g + run
            rest = blocks[start:]
            hints = [BlockHint(tag, key_of[blocks[d - 1]] if d else None, d) for d in range(start, len(blocks))]
            if rest:
                cache.put([key_of[b] for b in rest], [bytes(BLOCK)] * len(rest), hints=hints)
        return hits, policy.calls
    finally:
        cache.close()


@pytest.mark.parametrize("keep_prefixes", [False, True], ids=["unguarded", "keep-prefixes"])
@pytest.mark.parametrize("request_ends", [False, True], ids=["requests", "request-ends"])
def test_the_simulator_calls_the_policy_exactly_as_a_tier_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              request_ends: bool, keep_prefixes: bool) -> None:
    wl = sessions_workload()
    if request_ends:  # each response ends 2 s after its request, before the next request (5 s on)
        wl = replace(wl, ends=[t + 2.0 for t in wl.times])
    gpu_hits = gpu_prefix_hits(wl, 4)
    capacity = 30
    sim_policy = Recording()
    sim_hits = replay_policy(wl, gpu_hits, sim_policy, capacity,
                             ReplaySetup(request_ends=request_ends, keep_prefixes=keep_prefixes))
    clock = [0.0]
    monkeypatch.setattr(lifeboatcache_core.tier, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    tier_hits, tier_calls = run_real_tier(tmp_path, wl, gpu_hits, capacity, request_ends, keep_prefixes, clock)
    if keep_prefixes:  # the guard declined blocks: a victim was chosen and no remove followed
        assert any(c[0] == "victim" and nxt[0] != "remove" for c, nxt in pairwise(tier_calls))
    kinds = {c[0] for c in sim_policy.calls}
    assert kinds == {"admit", "insert", "touch", "victim", "remove"} | ({"request_done"} if request_ends else set())
    assert any(c[0] == "touch" for c in sim_policy.calls[1:]) and sum(sim_hits) > 0
    assert sim_policy.calls == tier_calls
    assert sim_hits == tier_hits
