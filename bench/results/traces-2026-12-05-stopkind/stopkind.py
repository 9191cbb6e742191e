"""Issue 17, item 2: does EpiCache predict returns better when told what a session waits for?

The traces record why each response stopped (``stop``): ``tool_use`` (the agent runs a tool and
is back in seconds: gap after the response p50 8.9 s, p90 78 s over the 150 traces) or
``end_turn`` (it waits for its user: p50 224 s, p90 56 min). An agent framework knows this when
the response ends; the engine's KV connector does not. Here the replay tells the policy at each
response's end (request time + its ``api_time``, so no policy decision sees it earlier) through
``awaiting(session, kind)``, and two variants use it:

* ``rhythm+kind``: the rhythm predictor (the default) with one learnt gap per session *per kind*;
  at a response's end the session's deadline is recomputed with the gap of what it now waits for.
* ``returns+kind``: the returns model with the class of a wait being its kind (none, tool, user,
  other) instead of the previous gap's length.

Scored on the five folds of ``bench traces --folds 5`` (same split, schedule, GPU cache), each
beside LRU, Bélády and the installed defaults, pooled as the folds pool them.

    .venv/bin/python bench/results/traces-2026-12-05-stopkind/stopkind.py [FRACTION ...]
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from typing import Any

from lifeboatcache_core.abc import BlockHint
from lifeboatcache_policy_epicache.policy import EpiCacheConfig, EpiCachePolicy

import lifeboatcache.traces as traces
from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.belady import simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads
from lifeboatcache.sim.replay import simulate, split_tokens
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import Workload

KINDS = {"tool_use": 1, "end_turn": 2}  # anything else: 3 (other); 0: no wait seen yet
_stops: dict[int, tuple[int, float]] = {}  # id(TraceRequest) -> (kind, api_time)
_parse = traces._parse_request


def _parse_keeping_stop(raw: dict[str, Any], offset: float) -> traces.TraceRequest:
    request = _parse(raw, offset)
    _stops[id(request)] = (KINDS.get(str(raw.get("stop") or ""), 3), float(raw.get("api_time") or 0.0))
    return request


traces._parse_request = _parse_keeping_stop  # the loader keeps no stop reason: read it beside


class RhythmByKind(EpiCachePolicy):
    """The rhythm predictor with a learnt gap per session and kind of wait."""

    def __init__(self) -> None:
        super().__init__()
        self._kind_gap: dict[Any, dict[int, float]] = {}
        self._waiting: dict[Any, int] = {}
        self._kind_mean: dict[int, list[float]] = {}  # kind -> [mean log gap, count (capped)]

    def awaiting(self, tag: str, kind: int) -> None:
        episode_id = ("tag", tag)
        self._waiting[episode_id] = kind
        episode = self._episodes.get(episode_id)
        log_gap = self._kind_gap.get(episode_id, {}).get(kind)
        if log_gap is None and kind in self._kind_mean:
            log_gap = self._kind_mean[kind][0]
        if episode is None or log_gap is None:
            return
        gap = 2.0 ** log_gap
        episode.deadline = episode.last + gap * self._patience
        episode.warm_key = -(episode.last + gap)
        self._push_rhythm(episode_id, episode)

    def _visit(self, episode_id: Any) -> Any:
        episode = self._episodes.get(episode_id)
        if episode is not None and self._clock - episode.last_op > 1:
            kind = self._waiting.pop(episode_id, None)
            if kind is not None:
                log_gap = math.log2(max(self._now() - episode.last, 1e-3))
                mean = self._kind_mean.setdefault(kind, [log_gap, 0])
                mean[1] = min(mean[1] + 1, 100)
                mean[0] += (log_gap - mean[0]) / mean[1]
                own = self._kind_gap.setdefault(episode_id, {})
                own[kind] = own[kind] + 4 * self._alpha * (log_gap - own[kind]) if kind in own else log_gap
        return super()._visit(episode_id)


class ReturnsByKind(EpiCachePolicy):
    """The returns model with a wait's class being what the session waits for."""

    def __init__(self) -> None:
        super().__init__(EpiCacheConfig(predictor="returns"))

    def awaiting(self, tag: str, kind: int) -> None:
        episode_id = ("tag", tag)
        episode = self._episodes.get(episode_id)
        if episode is None:
            return
        episode.klass = kind
        if episode.bucket is not None:
            self._unlist(episode_id, episode)
            self._list(episode_id, episode)

    def _visit(self, episode_id: Any) -> Any:
        episode = self._episodes.get(episode_id)
        if episode is None or self._clock - episode.last_op <= 1:
            return super()._visit(episode_id)
        now = self._now()
        gap = now - episode.last
        self._model.observe(episode.klass, gap)
        episode.log_gap += self._alpha * (math.log2(max(gap, 1e-3)) - episode.log_gap)
        episode.last, episode.last_op = now, self._clock
        episode.klass = episode.age_bin = 0  # served now; its next wait's kind comes at the response's end
        if episode.bucket is not None:
            self._unlist(episode_id, episode)
            self._list(episode_id, episode)
        return episode


def replay_told(workload: Workload, waits: list[tuple[int, float]], gpu_hits: list[int],
                policy: Any, capacity: int) -> list[int]:
    """``sim.replay.replay_policy``'s calls, plus ``awaiting`` at each response's end."""
    present: set[int] = set()
    now = [0.0]
    policy.clock = lambda: now[0]
    ends: list[tuple[float, int, str, int]] = []
    tier_hits: list[int] = []
    for n, (blocks, g, tag, t, (kind, api_s)) in enumerate(
            zip(workload.blocks, gpu_hits, workload.streams, workload.times, waits, strict=True)):
        while ends and ends[0][0] <= t:
            now[0], _, who, what = heapq.heappop(ends)
            policy.awaiting(who, what)
        now[0] = t
        pos = g
        while pos < len(blocks) and blocks[pos] in present:
            policy.touch(blocks[pos])
            pos += 1
        tier_hits.append(pos - g)
        parent = blocks[pos - 1] if pos else None
        for depth in range(pos, len(blocks)):
            block = blocks[depth]
            if block in present:
                policy.touch(block)
            else:
                hint = BlockHint(tag, parent, depth)  # type: ignore[arg-type]
                if policy.admit(block, 1, hint):
                    while len(present) >= capacity:
                        victim = policy.victim(block)
                        if victim is None:
                            break
                        policy.remove(victim)
                        present.discard(victim)
                    if len(present) < capacity:
                        present.add(block)
                        policy.insert(block, 1, hint)
            parent = block
        heapq.heappush(ends, (t + api_s, n, tag, kind))
    return tier_hits


def main() -> None:
    fractions = [float(a) for a in sys.argv[1:]] or [0.02, 0.05]
    conversations = traces.load_traces(DEFAULT_TRACES)
    pooled: dict[float, dict[str, float]] = {}
    for fold in fold_workloads(conversations, 5, gpu_blocks=DEFAULT_GPU_BLOCKS):
        members = set(fold.conversations)
        items = traces.schedule([c for c in conversations if c.id in members], seed=0, spread_s=3600.0)
        waits = [_stops[id(item.request)] for item in items]
        workload = fold.workload
        gpu_hits = gpu_prefix_hits(workload, fold.gpu_blocks)
        tokens = sum(workload.input_tokens)
        for fraction in fractions:
            started = time.process_time()
            capacity = workload.capacity_blocks(fraction)
            rates = {
                "lru": simulate(workload, gpu_hits, make_policy("lru"), capacity).hit_frac,
                "belady": simulate_belady(workload, gpu_hits, capacity, fraction).hit_frac,
                "rhythm (default)": simulate(workload, gpu_hits, make_policy("epicache"), capacity).hit_frac,
                "returns": simulate(workload, gpu_hits, make_policy("epicache", options={"predictor": "returns"}),
                                    capacity).hit_frac,
            }
            for name, policy in (("rhythm+kind", RhythmByKind()), ("returns+kind", ReturnsByKind())):
                engine, tiers, recomputed = split_tokens(
                    workload, gpu_hits, replay_told(workload, waits, gpu_hits, policy, capacity))
                rates[name] = (engine + tiers) / (engine + tiers + recomputed)
            gap = rates["belady"] - rates["lru"]
            print(f"fold {fold.index} at {fraction}: " + ", ".join(
                f"{name} {(rate - rates['lru']) / gap:.3f}" for name, rate in rates.items() if name not in (
                    "lru", "belady")) + f" of the gap ({time.process_time() - started:.0f} s CPU)", flush=True)
            for name, rate in rates.items():
                pooled.setdefault(fraction, {}).setdefault(name, 0.0)
                pooled[fraction][name] += rate * tokens
    for fraction, sums in pooled.items():
        gap = sums["belady"] - sums["lru"]
        print(f"pooled at {fraction}: " + ", ".join(
            f"{name} {(total - sums['lru']) / gap:.3f}" for name, total in sums.items() if name not in (
                "lru", "belady")) + " of the LRU -> Belady gap")


if __name__ == "__main__":
    main()
