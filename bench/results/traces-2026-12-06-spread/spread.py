"""Issue 17, item 2: does a session's gap *spread* predict its return better than one smoothed gap?

The rhythm predictor (EpiCache's default) gives every session one learnt gap, the log-EWMA of its
visit gaps, and calls it cold ``patience`` (1.5) gaps after its last visit. Sessions differ in how
regular they are: an agent in a run of tool calls comes back every few seconds, one that
alternates tool calls with waits for its user has gaps spread over three orders of magnitude.
Variants, each a subclass that changes only the rhythm's bookkeeping in ``_visit``:

* ``spread z``: also learn the EW variance of the log gap (same smoothing, prior: the running
  variance over all sessions); cold at ``last + 2 ** (mean + z * sd)``, z in place of patience.
* ``last w``: the expected gap blends the last gap with the smoothed one in log space (weight w
  on the last), cold at ``patience`` times that.

Scored on the five folds of ``bench traces --folds 5`` (same split, schedule, GPU cache), with
the same held-fold selection: each fold's variant is the one with the best mean gap closed over
the sizes on the other four folds.

    .venv/bin/python bench/results/traces-2026-12-06-spread/spread.py
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Any

from lifeboatcache_policy_epicache.policy import EpiCachePolicy, _Episode

import lifeboatcache.traces as traces
from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.belady import simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads, pooled_gap
from lifeboatcache.sim.replay import SimResult, simulate
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy

FRACTIONS = (0.02, 0.05, 0.1)


def _continued_visit(policy: EpiCachePolicy, episode_id: Hashable) -> _Episode | None:
    """The episode if this operation continues its visit (``EpiCachePolicy._visit``'s rule: no other
    operation in between), its operation counted; None for a new visit."""
    episode = policy._episodes.get(episode_id)
    if episode is not None and policy._clock - episode.last_op <= 1:
        episode.last_op = policy._clock
        return episode
    return None


class Spread(EpiCachePolicy):
    """Rhythm with a learnt log-gap spread: cold at mean + z sd (log2 seconds)."""

    def __init__(self, z: float) -> None:
        super().__init__()
        self._z = z
        self._var: dict[Hashable, float] = {}
        self._global_var = 1.0

    def _visit(self, episode_id: Hashable) -> _Episode:
        same = _continued_visit(self, episode_id)
        if same is not None:
            return same
        op = self._clock
        episode = self._episodes.get(episode_id)
        now = self._now()
        if episode is None:
            episode = self._episodes[episode_id] = _Episode(op, now, self._global_log_gap)
            self._var[episode_id] = self._global_var
        else:
            log_gap = math.log2(max(now - episode.last, 1e-3))
            diff = log_gap - episode.log_gap
            episode.log_gap += self._alpha * diff
            var = self._var.get(episode_id, self._global_var)
            self._var[episode_id] = (1 - self._alpha) * (var + self._alpha * diff * diff)
            if self._global_gaps < 100:
                self._global_gaps += 1
            gdiff = log_gap - self._global_log_gap
            self._global_log_gap += gdiff / self._global_gaps
            self._global_var += (gdiff * (log_gap - self._global_log_gap) - self._global_var) / self._global_gaps
            episode.last, episode.last_op = now, op
        sd = math.sqrt(max(self._var.get(episode_id, self._global_var), 0.0))
        episode.deadline = now + 2.0 ** (episode.log_gap + self._z * sd)
        episode.warm_key = -(now + 2.0 ** episode.log_gap)
        self._push_rhythm(episode_id, episode)
        return episode


class LastBlend(EpiCachePolicy):
    """Rhythm whose expected gap leans on the last gap (weight w, log space)."""

    def __init__(self, w: float) -> None:
        super().__init__()
        self._w = w
        self._last_log: dict[Hashable, float] = {}

    def _visit(self, episode_id: Hashable) -> _Episode:
        same = _continued_visit(self, episode_id)
        if same is not None:
            return same
        episode = self._episodes.get(episode_id)
        before = None if episode is None else episode.last
        episode = super()._visit(episode_id)  # rhythm bookkeeping; we redo the deadline
        if before is not None:
            self._last_log[episode_id] = math.log2(max(episode.last - before, 1e-3))
        last = self._last_log.get(episode_id, episode.log_gap)
        gap = 2.0 ** ((1 - self._w) * episode.log_gap + self._w * last)
        episode.deadline = episode.last + gap * self._patience
        episode.warm_key = -(episode.last + gap)
        self._push_rhythm(episode_id, episode)
        return episode


VARIANTS: dict[str, Callable[[], Any]] = {
    "rhythm (default)": lambda: make_policy("epicache"),
    "spread 0.5": lambda: Spread(0.5),
    "spread 1.0": lambda: Spread(1.0),
    "spread 1.5": lambda: Spread(1.5),
    "last 0.3": lambda: LastBlend(0.3),
    "last 0.6": lambda: LastBlend(0.6),
}


def main() -> None:
    conversations = traces.load_traces(DEFAULT_TRACES)
    folds = fold_workloads(conversations, 5, gpu_blocks=DEFAULT_GPU_BLOCKS)
    cells: dict[tuple[int, float, str], SimResult] = {}

    def row(f: int, fraction: float, name: str) -> tuple[SimResult, SimResult, SimResult]:
        return cells[(f, fraction, name)], cells[(f, fraction, "lru")], cells[(f, fraction, "belady")]

    for fold in folds:
        wl = fold.workload
        gpu_hits = gpu_prefix_hits(wl, fold.gpu_blocks)
        for fraction in FRACTIONS:
            started = time.process_time()
            capacity = wl.capacity_blocks(fraction)
            cells[(fold.index, fraction, "lru")] = simulate(wl, gpu_hits, make_policy("lru"), capacity, fraction)
            cells[(fold.index, fraction, "belady")] = simulate_belady(wl, gpu_hits, capacity, fraction)
            for name, build in VARIANTS.items():
                cells[(fold.index, fraction, name)] = simulate(wl, gpu_hits, build(), capacity, fraction)
            print(f"fold {fold.index} at {fraction}: " + ", ".join(
                f"{name} {pooled_gap([row(fold.index, fraction, name)]):.3f}" for name in VARIANTS)
                + f" ({time.process_time() - started:.0f} s CPU)", flush=True)
    k = len(folds)
    for fraction in FRACTIONS:
        print(f"pooled at {fraction}: " + ", ".join(
            f"{name} {pooled_gap([row(f, fraction, name) for f in range(k)]):.3f}" for name in VARIANTS))

    def objective(name: str, on: list[int]) -> float:
        return sum(pooled_gap([row(f, fr, name) for f in on]) for fr in FRACTIONS) / len(FRACTIONS)

    names = list(VARIANTS)
    picks = [max(names, key=lambda n: (objective(n, [f for f in range(k) if f != held]), -names.index(n)))
             for held in range(k)]
    print("picked per held fold:", picks)
    for fraction in FRACTIONS:
        selected = pooled_gap([row(f, fraction, picks[f]) for f in range(k)])
        default = pooled_gap([row(f, fraction, names[0]) for f in range(k)])
        print(f"held-fold pooled at {fraction}: selected {selected:.3f} vs default {default:.3f}")


if __name__ == "__main__":
    main()
