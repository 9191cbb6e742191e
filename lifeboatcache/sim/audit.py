"""Checks that a simulated policy sees only the past: no decision depends on a later request.

A simulation is only a fair test of an online policy if the policy cannot read the future,
and in Python nothing stops a policy from reading it (the replay's frame, the workload object,
a clock set ahead). So the check is behavioural, whatever the channel: the same policy is
replayed on the workload and on copies whose requests after a cut are removed or reordered,
and every decision it takes while serving the requests before the cut (each ``victim`` and
``admit`` answer, and the tier hits they produce) must be the same in all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from lifeboatcache_core.abc import EvictionPolicy

from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import PLAIN, ReplaySetup, replay_policy
from lifeboatcache.sim.workload import Workload


class FutureLeak(AssertionError):
    """A policy's decisions before a request changed when only requests after it changed."""


def _futures(workload: Workload, cut: int) -> dict[str, Workload]:
    """Copies of ``workload`` equal to it before request ``cut`` and different after it."""
    n = len(workload.blocks)
    reordered = list(range(cut)) + list(range(n - 1, cut - 1, -1))
    ends = workload.ends
    return {
        "truncated": replace(workload, blocks=workload.blocks[:cut], input_tokens=workload.input_tokens[:cut],
                             streams=workload.streams[:cut], times=workload.times[:cut],
                             ends=None if ends is None else ends[:cut]),
        "reversed": replace(workload, blocks=[workload.blocks[i] for i in reordered],
                            input_tokens=[workload.input_tokens[i] for i in reordered],
                            streams=[workload.streams[i] for i in reordered], times=list(workload.times),
                            # a moved request keeps its own duration, from the time of its new place
                            ends=None if ends is None else [workload.times[p] + ends[i] - workload.times[i]
                                                            for p, i in enumerate(reordered)]),
    }


def _decisions(workload: Workload, make_policy: Callable[[], EvictionPolicy], capacity_blocks: int,
               gpu_blocks: int, setup: ReplaySetup) -> tuple[list[tuple[str, object, object]], list[int]]:
    """Every victim and admit answer of one replay, in order, and the per-request tier hits."""
    policy = make_policy()
    log: list[tuple[str, object, object]] = []
    victim, admit = policy.victim, policy.admit

    def logged_victim(incoming=None):  # type: ignore[no-untyped-def]
        chosen = victim(incoming)
        log.append(("victim", incoming, chosen))
        return chosen

    def logged_admit(key, size, hint=None):  # type: ignore[no-untyped-def]
        answer = admit(key, size, hint)
        log.append(("admit", key, answer))
        return answer

    policy.victim = logged_victim  # type: ignore[method-assign]
    policy.admit = logged_admit  # type: ignore[method-assign]
    hits = replay_policy(workload, gpu_prefix_hits(workload, gpu_blocks), policy, capacity_blocks,
                         setup)
    return log, hits


def check_only_the_past(workload: Workload, make_policy: Callable[[], EvictionPolicy], capacity_blocks: int,
                        *, cut: int | None = None, gpu_blocks: int = 0, setup: ReplaySetup = PLAIN) -> int:
    """Raise ``FutureLeak`` unless the decisions before request ``cut`` ignore what follows it.

    ``cut`` defaults to two thirds of the requests; ``setup``: how the tier is replayed
    (``sim.replay.replay_policy``). Returns how many decisions were compared
    (a check that compared none proves nothing: callers assert it is large).
    """
    n = len(workload.blocks)
    cut = cut if cut is not None else (2 * n) // 3
    if not 0 < cut < n:
        raise ValueError(f"cut {cut} must leave requests on both sides (0 < cut < {n})")
    full_log, full_hits = _decisions(workload, make_policy, capacity_blocks, gpu_blocks, setup)
    compared = 0
    futures = _futures(workload, cut)
    past_log, past_hits = _decisions(futures["truncated"], make_policy, capacity_blocks, gpu_blocks, setup)
    for name, other in futures.items():
        log, hits = (past_log, past_hits) if name == "truncated" else _decisions(
            other, make_policy, capacity_blocks, gpu_blocks, setup)
        before = len(past_log)  # the decisions taken while serving requests before the cut
        if full_log[:before] != log[:before]:
            pairs = enumerate(zip(full_log, log, strict=False))
            i = next((i for i, (a, b) in pairs if a != b), min(len(full_log), len(log)))
            raise FutureLeak(f"decision {i} (before request {cut}) differs with a {name} future: "
                             f"{full_log[i:i + 1]} vs {log[i:i + 1]}")
        if full_hits[:cut] != hits[:cut]:
            raise FutureLeak(f"tier hits before request {cut} differ with a {name} future")
        compared = before
    return compared
