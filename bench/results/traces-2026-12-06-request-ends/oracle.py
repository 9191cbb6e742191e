"""Issue 17, item 2: which piece of the future would close the rhythm's gap to Bélády? (a diagnostic, not a policy)

EpiCache's rhythm predictor (the default) evicts cold sessions (past ``patience`` x their gap)
first, most overdue first, then the warm session expected back last. Each variant below gives it
one piece of the true future, read from the replay's own workload (so every one of them fails
``sim.audit.check_only_the_past`` on purpose), applied at each visit and again whenever one of
the session's requests passes (a request the GPU cache served never reaches the tier):

* ``exact``: sessions ordered by their true next request (episode-level Bélády);
* ``ended``: a session that never sends another request is cold at once, the rest as the rhythm;
* ``long``: a session whose next request is more than 60 s away is cold at once;
* ``warm-exact``: the rhythm's cold rule, warm sessions ordered by their true next request.

Same five folds, sizes and scoring as ``bench traces --folds 5`` (default replay, no request ends).

    .venv/bin/python bench/results/traces-2026-12-06-request-ends/oracle.py [FRACTION ...]
"""

from __future__ import annotations

import bisect
import math
import sys
import time
from collections.abc import Hashable

from lifeboatcache_policy_epicache.policy import EpiCachePolicy, _Episode

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.belady import simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.folds import fold_workloads, pooled_gap
from lifeboatcache.sim.replay import SimResult, simulate
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, make_policy
from lifeboatcache.sim.workload import Workload
from lifeboatcache.traces import load_traces

MODES = ("exact", "ended", "long", "warm-exact")
LONG_S = 60.0


class Foresight(EpiCachePolicy):
    """The rhythm with one piece of the future (``mode``)."""

    def __init__(self, workload: Workload, mode: str) -> None:
        super().__init__()
        self._mode = mode
        self._requests: dict[str, list[float]] = {}
        for stream, t in zip(workload.streams, workload.times, strict=True):
            self._requests.setdefault(stream, []).append(t)
        self._passing = list(zip(workload.times, workload.streams, strict=True))
        self._passed = 0

    def _next_request(self, tag: str, after: float) -> float:
        times = self._requests[tag]
        i = bisect.bisect_right(times, after + 1e-9)
        return times[i] if i < len(times) else math.inf

    def victim(self, incoming: object = None) -> object:  # type: ignore[override]
        now = self._now()
        while self._passed < len(self._passing) and self._passing[self._passed][0] <= now:
            t, stream = self._passing[self._passed]
            self._passed += 1
            episode = self._episodes.get(("tag", stream))
            if episode is not None and episode.blocks:
                self._foresee(("tag", stream), episode, t)
        return super().victim(incoming)  # type: ignore[arg-type]

    def _visit(self, episode_id: Hashable) -> _Episode:
        op = self._clock
        episode = self._episodes.get(episode_id)
        if episode is not None and op - episode.last_op <= 1:
            episode.last_op = op
            return episode
        episode = super()._visit(episode_id)
        if isinstance(episode_id, tuple) and episode_id[0] == "tag":
            self._foresee(episode_id, episode, episode.last)
        return episode

    def _foresee(self, episode_id: Hashable, episode: _Episode, at: float) -> None:
        back = self._next_request(episode_id[1], at)  # type: ignore[index]
        if self._mode == "exact":
            episode.deadline, episode.warm_key = math.inf, -back
        elif self._mode == "ended" and back == math.inf:
            episode.deadline = -math.inf
        elif self._mode == "long" and back - at > LONG_S:
            episode.deadline = -math.inf
        elif self._mode == "warm-exact":
            episode.warm_key = -back
        self._push_rhythm(episode_id, episode)


def main() -> None:
    fractions = [float(a) for a in sys.argv[1:]] or [0.02, 0.05, 0.1]
    folds = fold_workloads(load_traces(DEFAULT_TRACES), 5, gpu_blocks=DEFAULT_GPU_BLOCKS)
    rows: dict[tuple[float, str], list[tuple[SimResult, SimResult, SimResult]]] = {}
    for fold in folds:
        wl = fold.workload
        gpu_hits = gpu_prefix_hits(wl, fold.gpu_blocks)
        for fraction in fractions:
            started = time.process_time()
            capacity = wl.capacity_blocks(fraction)
            lru = simulate(wl, gpu_hits, make_policy("lru"), capacity, fraction)
            best = simulate_belady(wl, gpu_hits, capacity, fraction)
            runs = {"rhythm (default)": simulate(wl, gpu_hits, make_policy("epicache"), capacity, fraction)}
            for mode in MODES:
                runs[mode] = simulate(wl, gpu_hits, Foresight(wl, mode), capacity, fraction)
            for name, result in runs.items():
                rows.setdefault((fraction, name), []).append((result, lru, best))
            print(f"fold {fold.index} at {fraction}: " + ", ".join(
                f"{name} {pooled_gap([(r, lru, best)]):.3f}" for name, r in runs.items())
                + f" ({time.process_time() - started:.0f} s CPU)", flush=True)
    for fraction in fractions:
        names = [name for (fr, name) in rows if fr == fraction]
        print(f"pooled at {fraction}: " + ", ".join(f"{n} {pooled_gap(rows[(fraction, n)]):.3f}" for n in names))


if __name__ == "__main__":
    main()
