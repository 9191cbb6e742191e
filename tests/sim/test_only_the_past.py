"""The simulator gives policies only the past: every shipped policy passes the check, an oracle fails it."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.builtin.lru import LRUPolicy
from lifeboatcache_core.keys import BlockKey

from lifeboatcache.sim.audit import FutureLeak, check_only_the_past
from lifeboatcache.sim.replay import ReplaySetup
from lifeboatcache.sim.sweep import make_policy
from lifeboatcache.sim.workload import Workload, load_workload


def agent_sessions(seed: int = 3, sessions: int = 10, requests: int = 240) -> Workload:
    """Sessions whose prompts grow turn by turn, with short (tool) and long (user) gaps, interleaved."""
    rng = random.Random(seed)
    prompts: dict[int, list[int]] = {s: [s * 10_000 + i for i in range(rng.randint(2, 8))] for s in range(sessions)}
    due = {s: rng.uniform(0, 60) for s in range(sessions)}
    next_id = {s: s * 10_000 + 100 for s in range(sessions)}
    blocks, times, streams, ends = [], [], [], []
    for _ in range(requests):
        s = min(due, key=due.__getitem__)
        grow = rng.randint(1, 4)
        prompts[s] = prompts[s] + list(range(next_id[s], next_id[s] + grow))
        next_id[s] += grow
        blocks.append(list(prompts[s]))
        times.append(due[s])
        ends.append(due[s] + rng.uniform(0.5, 7.5))  # the response ends before the session's next request
        streams.append(f"s{s}" if s % 3 else f"s{s - 1 if s else 1}/agent_{s}")
        due[s] += rng.choice((8.0, 12.0, 20.0, 300.0))
    distinct = {b for p in blocks for b in p}
    return Workload(blocks=blocks, input_tokens=[64 * len(p) for p in blocks], streams=streams, times=times,
                    block_tokens=64, working_set=len(distinct), ends=ends)


class Oracle(LRUPolicy):
    """A planted leak: evicts the held block needed farthest in the future, read from the replay's frame."""

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        frame = sys._getframe(1)  # up to replay_policy: its workload and the current request's time
        while "workload" not in frame.f_locals or "t" not in frame.f_locals:
            frame = frame.f_back  # type: ignore[assignment]
        workload, now = frame.f_locals["workload"], frame.f_locals["t"]
        upcoming: dict[object, float] = {}
        for blocks, t in zip(reversed(workload.blocks), reversed(workload.times), strict=True):
            if t <= now:
                break
            upcoming.update(dict.fromkeys(blocks, t))
        return max(self._order, key=lambda k: upcoming.get(k, float("inf")), default=None)

    def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
        return True


def test_an_oracle_policy_is_caught_reading_the_future() -> None:
    wl = agent_sessions()
    with pytest.raises(FutureLeak):
        check_only_the_past(wl, Oracle, capacity_blocks=wl.working_set // 10)


@pytest.mark.parametrize("setup", [ReplaySetup(), ReplaySetup(request_ends=True),
                                   ReplaySetup(request_ends=True, keep_prefixes=True)],
                         ids=["requests", "request-ends", "request-ends-keep-prefixes"])
@pytest.mark.parametrize("name", ["lru", "arc", "score", "epicache"])
def test_every_shipped_policy_decides_on_the_past_only(name: str, setup: ReplaySetup) -> None:
    wl = agent_sessions()
    for capacity in (wl.working_set // 20, wl.working_set // 5):
        compared = check_only_the_past(wl, lambda: make_policy(name), capacity_blocks=capacity, setup=setup)
        assert compared > 500  # enough decisions before the cut to mean something


def test_epicache_on_real_traces_decides_on_the_past_only(traces_dir: Path) -> None:
    wl = load_workload(traces_dir, limit=2)
    assert check_only_the_past(wl, lambda: make_policy("epicache"), wl.capacity_blocks(0.05), gpu_blocks=64) > 500
