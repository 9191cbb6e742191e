"""What each policy is for, on small hand-made sequences a tier would produce."""

from __future__ import annotations

import math
import time

import pytest
from lifeboatcache_core.abc import BlockHint, EvictionPolicy
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing.contracts import key
from lifeboatcache_policy_arc.policy import ARCPolicy
from lifeboatcache_policy_epicache.policy import EpiCacheConfig, EpiCachePolicy
from lifeboatcache_policy_score.policy import ScorePolicy


def evict(policy: EvictionPolicy, incoming: BlockKey | None = None) -> BlockKey:
    victim = policy.victim(incoming)
    assert victim is not None
    policy.remove(victim)
    return victim


def store_chain(policy: EvictionPolicy, ids: range, tag: str | None = None) -> None:
    """Store a prompt's blocks in prompt order, each naming its parent and depth."""
    parent = None
    for depth, i in enumerate(ids):
        policy.insert(key(i), 1, BlockHint(tag, parent, depth))
        parent = key(i)


# ------------------------------------------------------------------------------ ARC


def test_arc_keeps_a_reused_block_through_a_scan() -> None:
    arc = ARCPolicy()
    for i in range(4):
        arc.insert(key(i), 1)
    arc.touch(key(0))  # seen twice: T2
    for i in range(100, 140):  # a scan of one-off blocks through a 4-block tier
        evict(arc, key(i))
        arc.insert(key(i), 1)
    assert key(0) in arc


def test_arc_ghost_hit_adapts_the_recency_target() -> None:
    arc = ARCPolicy()
    for i in range(4):
        arc.insert(key(i), 1)
    arc.touch(key(3))
    assert evict(arc, key(9)) == key(0)  # the oldest once-seen block leaves and becomes a ghost
    before = arc.target_t1
    arc.insert(key(0), 1)  # it comes back: T1 was too small
    assert arc.target_t1 > before and key(0) in arc


def test_arc_plain_delete_leaves_no_ghost() -> None:
    arc = ARCPolicy()
    arc.insert(key(1), 1)
    arc.insert(key(2), 1)
    arc.remove(key(1))  # not proposed as a victim: a delete or a corrupt block
    arc.insert(key(1), 1)
    assert arc.target_t1 == 0.0


def test_arc_offers_its_order_ahead_and_a_later_pick_taken_becomes_a_ghost() -> None:
    """A stager may take a later pick of ``victims``: it was evicted, so its return adapts ``p``
    as the proposed victim's would (before, only the proposed key made a ghost)."""
    arc = ARCPolicy()
    for i in range(6):
        arc.insert(key(i), 1)
    arc.touch(key(4))  # T1: 0 1 2 3 5, T2: 4
    assert arc.victims(None, 8) == [key(i) for i in (0, 1, 2, 3, 5, 4)]
    arc.remove(key(2))  # the third pick, taken
    before = arc.target_t1
    arc.insert(key(2), 1)
    assert arc.target_t1 > before and key(2) in arc


@pytest.mark.parametrize("predictor", ["rhythm", "returns"])
def test_epicache_offers_its_order_ahead(predictor: str) -> None:
    """The rhythm predictor reads its order ahead, episode by episode, tail first (the returns
    predictor offers its victim only)."""
    epi = EpiCachePolicy(EpiCacheConfig(predictor=predictor))
    store_chain(epi, range(0, 3), tag="a")
    store_chain(epi, range(10, 13), tag="b")
    ahead = epi.victims(None, 10)
    assert ahead[0] == epi.victim(None)
    if predictor == "returns":
        assert len(ahead) == 1
    else:
        a_tail_first, b_tail_first = [key(2), key(1), key(0)], [key(12), key(11), key(10)]
        assert ahead in (a_tail_first + b_tail_first, b_tail_first + a_tail_first)


# ------------------------------------------------------------------------------ score


def test_score_evicts_a_chain_tail_first() -> None:
    score = ScorePolicy()
    store_chain(score, range(10))
    assert [evict(score) for _ in range(3)] == [key(9), key(8), key(7)]


def test_score_keeps_a_reread_prefix_over_one_off_blocks() -> None:
    score = ScorePolicy()
    store_chain(score, range(5))  # a session's prefix
    for _turn in range(4):  # read at every turn, with other traffic in between
        for i in range(5):
            score.touch(key(i))
        for j in range(20):
            score.insert(key(1000 + _turn * 20 + j), 1, BlockHint(None, None, 0))  # one-offs
    victims = {evict(score) for _ in range(60)}
    assert not victims & {key(i) for i in range(5)}


# ------------------------------------------------------------------------------ EpiCache


def test_epicache_groups_a_prefix_chain_into_one_episode_and_drains_the_cold_one() -> None:
    epi = EpiCachePolicy(EpiCacheConfig(predictor="rhythm", patience=2.0, clock="operations"))
    for _turn in range(6):  # two sessions, alternating; then only B keeps coming
        store_chain(epi, range(0, 8))
        store_chain(epi, range(100, 108))
    for _turn in range(6):
        store_chain(epi, range(100, 108))
    # A is cold: all of A goes before any of B, deepest block first
    victims = [evict(epi) for _ in range(8)]
    assert victims == [key(i) for i in range(7, -1, -1)]


def test_epicache_evicts_an_episodes_deepest_block_first_whatever_order_its_blocks_came_in() -> None:
    """Within an episode the deepest block goes first, the oldest first at one depth: also for a block
    shallower than the episode's deepest (a depth it did not hold, or one whose blocks all left), a
    block of unknown depth (counted as 0), and after the blocks between two depths were removed."""
    epi = EpiCachePolicy(EpiCacheConfig(clock="operations", stale_first=False))
    for i, depth in [(0, 0), (5, 5), (3, 3), (4, 3), (9, None), (7, 7)]:
        epi.insert(key(i), 1, BlockHint("a", None, depth))
    epi.remove(key(5))  # depth 5 now holds nothing, below the deepest
    epi.insert(key(6), 1, BlockHint("a", None, 5))
    assert epi.victims(None, 10) == [key(7), key(6), key(3), key(4), key(0), key(9)]
    epi.remove(key(3))
    epi.remove(key(4))  # depth 3 holds nothing: the deepest after 5 is 0
    assert [evict(epi) for _ in range(4)] == [key(7), key(6), key(0), key(9)]
    assert len(epi) == 0 and epi.victim(None) is None


def test_epicache_a_session_that_keeps_its_head_and_tail_keeps_its_order_in_memory_of_its_blocks() -> None:
    """A session whose middle went (a tier's other removals) lists depths in proportion to the blocks it holds
    (white box: the memory bound), and still gives up its deepest first, also a middle depth stored again."""
    epi = EpiCachePolicy(EpiCacheConfig(clock="operations", stale_first=False))
    store_chain(epi, range(1000), tag="a")
    for i in range(1, 999):
        epi.remove(key(i))
    assert epi.victims(None, 10) == [key(999), key(0)]
    assert len(epi._episodes[("tag", "a")].depths) <= 2 * 2 + 16
    epi.insert(key(5000), 1, BlockHint("a", None, 500))
    epi.insert(key(5001), 1, BlockHint("a", None, 998))
    assert [evict(epi) for _ in range(4)] == [key(999), key(5001), key(5000), key(0)]


@pytest.mark.parametrize("predictor", ["returns", "rhythm"])
def test_epicache_returning_session_keeps_its_prefix(predictor: str) -> None:
    epi = EpiCachePolicy(EpiCacheConfig(clock="operations", predictor=predictor))  # type: ignore[arg-type]
    store_chain(epi, range(0, 20), tag="a")
    store_chain(epi, range(100, 120), tag="b")
    store_chain(epi, range(0, 20), tag="a")
    for _ in range(10):
        evict(epi)
    assert all(key(i) in epi for i in range(10)) and all(key(100 + i) in epi for i in range(10))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_epicache_measures_gaps_in_monotonic_seconds_by_default() -> None:
    assert EpiCachePolicy().clock is time.monotonic
    assert EpiCachePolicy(EpiCacheConfig(clock="operations")).clock is None
    epi = EpiCachePolicy(EpiCacheConfig(predictor="rhythm", gap_smoothing=0.5))  # learn the rhythm in a few turns
    epi.clock = clock = FakeClock()
    for turn in range(6):  # A and B take turns every 10 s
        clock.now = 20.0 * turn
        store_chain(epi, range(0, 8), tag="a")
        clock.now = 20.0 * turn + 10
        store_chain(epi, range(100, 108), tag="b")
    clock.now += 1.0  # then B sends 50 prompts within one second: many operations, little time
    for _ in range(50):
        store_chain(epi, range(100, 108), tag="b")
    # A is not late in seconds (an operation count would call it long gone): it keeps its blocks
    assert evict(epi) == key(107)


def _two_sessions(order: str) -> EpiCachePolicy:
    """A comes every 30 s, B every 5 s; A was served at t=60, B at t=62; now t=63 (neither late)."""
    epi = EpiCachePolicy(EpiCacheConfig(predictor="rhythm", warm_order=order, gap_smoothing=0.5))  # type: ignore[arg-type]
    epi.clock = clock = FakeClock()
    visits = sorted([(t, "a") for t in (0.0, 30.0, 60.0)] + [(t, "b") for t in range(32, 63, 5)])
    for t, tag in visits:
        clock.now = float(t)
        store_chain(epi, range(0, 8) if tag == "a" else range(100, 108), tag=tag)
        epi.insert(key(1000 + int(t)), 1, BlockHint("other", None, 0))  # visits end when another session stores
    for t in range(32, 63, 5):  # and the others' blocks are gone
        epi.remove(key(1000 + t))
    for t in (0, 30, 60):
        epi.remove(key(1000 + t))
    clock.now = 63.0
    return epi


def test_epicache_evicts_the_warm_session_served_last_by_default() -> None:
    # B was served a second ago; A has been away for 3 s of its gap: B goes first
    assert evict(_two_sessions("recent")) == key(107)
    # "farthest" trusts the learnt rhythms (A back at ~90 s, B at ~67 s) and takes A's tail
    assert evict(_two_sessions("farthest")) == key(7)


@pytest.mark.parametrize(("request_done", "back_at"), [("idle", 120.0), ("visit", 160.0)])
def test_epicache_counts_a_sessions_idle_time_from_its_finished_request(request_done: str, back_at: float) -> None:
    """A request runs 50 s (generation), the session is back 10 s after each response: with the
    ends reported (``request_done``) the rhythm learns the 10 s and expects it at end + 10 s; as
    plain visits the end's 50 s since the request began counts as a gap."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0, request_done=request_done))  # type: ignore[arg-type]
    epi.clock = clock = FakeClock()

    def other(t: float) -> None:  # another session's operation: the visit before it is over
        epi.insert(key(1000 + int(t)), 1, BlockHint("other", None, 0))

    for start in (0.0, 60.0):
        clock.now = start
        store_chain(epi, range(8), tag="a")
        other(start)
        clock.now = start + 50.0
        for i in reversed(range(8)):  # the finished request's chain, tail first
            epi.request_done(key(i))
        other(start + 50.0)
    assert epi.expected_return("a") == back_at


def test_epicache_learns_the_rhythm_of_a_session_it_sees_only_at_its_ends() -> None:
    """Requests served from a cache above the tier (vLLM's CPU tier) reach it only at their end:
    the gap from one end to the next is then all there is to learn, and is learnt."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))
    epi.clock = clock = FakeClock()
    store_chain(epi, range(8), tag="a")
    for t in (50.0, 110.0, 170.0):
        epi.insert(key(1000 + int(t)), 1, BlockHint("other", None, 0))  # another session in between
        clock.now = t
        for i in reversed(range(8)):
            epi.request_done(key(i))
    assert epi.expected_return("a") == 230.0


@pytest.mark.parametrize("late", ["touch", "request_done"])
def test_epicache_a_use_applied_after_a_later_visit_is_not_a_new_visit(late: str) -> None:
    """A tier applies uses from above late, each at its own time (``Tier._policy_now``), while
    stores reach the policy at once: a read at t = 25 s can arrive after a store at t = 30 s.
    It belongs to a visit already counted; as a new one it taught a gap of 1 ms (or moved the
    session's last visit back), and the session was expected back 1 ms after its last read."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))
    epi.clock = clock = FakeClock()
    for t in (0.0, 10.0, 20.0, 30.0):  # a every 10 s, another session's store after each visit
        clock.now = t
        store_chain(epi, range(4), tag="a")
        epi.insert(key(1000 + int(t)), 1, BlockHint("other", None, 0))
    assert epi.expected_return("a") == 40.0
    clock.now = 25.0  # the read at 25 s, applied now
    getattr(epi, late)(key(0))
    assert epi.expected_return("a") == 40.0


def test_epicache_a_visit_interleaved_with_other_sessions_operations_stays_one_visit() -> None:
    """A tier's write threads store two sessions' blocks at once, and it applies kept uses (reads
    from above, finished requests) between a store's ``admit`` and its ``insert``: one session's
    operations come with others' in between. Each such operation was a new visit, the session
    learnt a gap of 1 ms and was expected back 1 ms after its latest store."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))  # the gap learnt is the latest one
    epi.clock = clock = FakeClock()
    for visit in range(6):  # a and b come every 10 s, their stores interleaved over 40 ms
        for i in range(4):
            for s, tag in enumerate(("a", "b")):
                clock.now = 10.0 * visit + 0.01 * i
                k = key(1000 * s + 10 * visit + i)
                epi.insert(k, 1, BlockHint(tag, None if i == 0 else key(1000 * s + 10 * visit + i - 1), i))
    assert epi.expected_return("a") == pytest.approx(60.0)
    assert epi.expected_return("b") == pytest.approx(60.0)


def test_epicache_a_long_visit_interleaved_with_others_stays_one_visit() -> None:
    """A visit longer than the window (a long prompt's stores over seconds of prefill), alone at
    first, then interleaved with another session's operations, is still one visit: the window
    runs from the session's previous operation, not from the visit's start (which taught gaps
    of 1-2 s)."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))  # the gap learnt is the latest one
    epi.clock = clock = FakeClock()
    for visit in range(5):  # a's visits begin every 10 s and last 3 s, b's stores among the last 1.5 s
        for step in range(7):
            for s, tag in enumerate(("a", "b") if step >= 4 else ("a",)):
                clock.now = 10.0 * visit + 0.5 * step
                i = 10 * visit + step
                epi.insert(key(1000 * s + i), 1, BlockHint(tag, key(1000 * s + i - 1) if i else None, i))
    assert epi.expected_return("a") == pytest.approx(50.0)


def _rewritten_context(at_50: str = "rewritten", depths: bool = True, stale_first: bool = True) -> EpiCachePolicy:
    """A comes every 10 s with blocks 0-7 (last at 60 s, so expected back first), B came at 0 and
    40 s (expected back last: its deepest block is the episodes' first victim), C's one block is
    used between A's visits. At 50 s, ``at_50``: ``"rewritten"``, A's context was rewritten after
    its first 4 blocks (4-7 replaced by 20-23), and A sends that new context again at 60 s;
    ``"served_above"``, A's prompt grew by blocks 8-11 and the engine served 0-7 itself (device
    KV, vLLM's CPU tier), so the tier sees only the new blocks, at 50 and 60 s.
    """
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0, stale_first=stale_first))
    epi.clock = clock = FakeClock()

    def use(t: float, tag: str, ids: list[int], first_depth: int = 0) -> None:
        clock.now = t
        for n, i in enumerate(ids):
            depth = first_depth + n
            if key(i) in epi:
                epi.touch(key(i))
            else:
                parent = key(ids[n - 1]) if n else None
                epi.insert(key(i), 1, BlockHint(tag, parent, depth if depths else None))

    context = list(range(8))
    if at_50 == "rewritten":
        at = {50.0: [0, 1, 2, 3, 20, 21, 22, 23], 60.0: [0, 1, 2, 3, 20, 21, 22, 23]}
    else:
        at = {50.0: [8, 9, 10, 11], 60.0: [8, 9, 10, 11]}
    for t in (0.0, 1.0, 5.0, 11.0, 15.0, 21.0, 25.0, 31.0, 35.0, 40.0, 41.0, 45.0, 50.0, 55.0, 60.0):
        if t in (0.0, 40.0):
            use(t, "b", list(range(100, 108)))
        elif t % 10 == 5:
            use(t, "c", [200])
        else:
            ids = at.get(t, context)
            use(t, "a", ids, 8 if ids[0] == 8 else 0)
    return epi


LEFT = [key(4), key(5), key(6), key(7)]


def test_epicache_evicts_the_branch_a_session_left_before_any_episode() -> None:
    """Agents re-send their whole context: blocks the session's latest request did not use, though
    it used blocks as deep, belong to a context it left (97 % never come back in the traces)."""
    without = _rewritten_context(stale_first=False)
    first = evict(without)
    assert first == key(107)  # the episodes' order: B is expected back last
    epi = _rewritten_context()
    assert [evict(epi) for _ in range(5)] == [*LEFT, first]


def test_epicache_left_branches_come_first_in_the_victims_list() -> None:
    epi = _rewritten_context()
    assert epi.victims(None, 6) == [*LEFT, key(107), key(106)]
    assert epi.victims(None, 2) == LEFT[:2]


def test_epicache_a_prefix_served_above_is_not_a_left_branch() -> None:
    """A visit that used only deep blocks says nothing of the shallower ones: the engine served them."""
    assert evict(_rewritten_context("served_above")) == key(107)


def test_epicache_without_depths_nothing_counts_as_left() -> None:
    without = _rewritten_context(depths=False, stale_first=False)
    first = [evict(without) for _ in range(4)]
    assert not set(first) & set(LEFT)
    epi = _rewritten_context(depths=False)
    assert [evict(epi) for _ in range(4)] == first


def test_epicache_a_left_block_used_again_is_evicted_with_its_episode() -> None:
    epi = _rewritten_context()
    epi.touch(key(5))  # A went back to a block of its old context after all
    assert [evict(epi) for _ in range(4)] == [key(4), key(6), key(7), key(107)]


@pytest.mark.parametrize("late", ["touch", "request_done"])
def test_epicache_a_use_applied_late_belongs_to_the_visit_it_came_from(late: str) -> None:
    """A tier applies the uses it kept (vLLM's request ends, reads from above) when it next makes
    room, after the session's next visit may have begun: the old context's end, applied inside the
    request with the rewritten context, counted as a use in that visit, so the old blocks were
    not found left behind at the visit after it."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))
    epi.clock = clock = FakeClock()
    old, new = list(range(8)), [0, 1, 2, 3, 20, 21, 22, 23]

    def use(t: float, ids: list[int], tag: str = "a") -> None:
        clock.now = t
        for depth, i in enumerate(ids):
            if key(i) in epi:
                epi.touch(key(i))
            else:
                epi.insert(key(i), 1, BlockHint(tag, key(ids[depth - 1]) if depth else None, depth))

    use(0.0, old)
    use(5.0, [100], "c")
    use(10.0, new)
    clock.now = 1.0  # the end of the request at 0 s, applied now
    for i in reversed(old):
        getattr(epi, late)(key(i))
    use(15.0, [100], "c")
    use(20.0, new)
    assert sorted(evict(epi) for _ in range(4)) == [key(4), key(5), key(6), key(7)]


def test_epicache_calls_the_blocks_of_a_cold_session_abandoned() -> None:
    """A tier's ``keep_prefixes`` guard asks before it keeps a shallow block used lately rather
    than store a new one: past its own rhythm's deadline a session is gone for EpiCache, though
    the guard's one idle limit for all sessions (minutes) still calls its blocks in use."""
    epi = EpiCachePolicy(EpiCacheConfig(gap_smoothing=1.0))  # patience 1.5: cold 15 s after a visit
    epi.clock = clock = FakeClock()
    a = range(4)
    for t in (0.0, 10.0, 20.0):  # a every 10 s, another session's store after each visit
        clock.now = t
        store_chain(epi, a, tag="a")
        epi.insert(key(1000 + int(t)), 1, BlockHint("other", None, 0))
    clock.now = 34.0
    assert not any(epi.abandoned(key(i)) for i in a)
    clock.now = 36.0
    assert all(epi.abandoned(key(i)) for i in a)
    store_chain(epi, a, tag="a")  # back: warm again
    assert not any(epi.abandoned(key(i)) for i in a)
    assert not epi.abandoned(key(999))  # not held
    returns = EpiCachePolicy(EpiCacheConfig(predictor="returns"))  # no deadlines: only left blocks
    returns.clock = clock
    store_chain(returns, a, tag="a")
    clock.now = 1e6
    assert not any(returns.abandoned(key(i)) for i in a)


def test_epicache_first_gap_of_a_new_episode_is_the_mean_so_far() -> None:
    epi = EpiCachePolicy(EpiCacheConfig(predictor="rhythm"))
    epi.clock = clock = FakeClock()
    for t in (0.0, 8.0, 16.0):
        clock.now = t
        store_chain(epi, range(0, 4), tag="a")
        epi.insert(key(1000), 1, BlockHint("other", None, 0))  # a visit ends when another session stores
    store_chain(epi, range(100, 104), tag="c")  # a new session starts from the gaps seen: 8 s
    assert math.isclose(epi._episodes[("tag", "c")].log_gap, 3.0)


def _learnt_returns(bypass: str = "unlikely") -> tuple[EpiCachePolicy, FakeClock]:
    """The return model after 200 visits of agents that come back every 10-20 s (tool calls)."""
    epi = EpiCachePolicy(EpiCacheConfig(predictor="returns", bypass=bypass))  # type: ignore[arg-type]
    epi.clock = clock = FakeClock()
    for turn in range(100):
        for s, tag in enumerate(("a", "b")):
            clock.now = 15.0 * turn + 7.0 * s
            store_chain(epi, range(1000 * s, 1000 * s + 4 + turn), tag=tag)
    return epi, clock


def test_epicache_returns_evicts_the_session_idle_far_past_every_gap_seen() -> None:
    epi, clock = _learnt_returns()
    last = clock.now
    clock.now = last + 3.0  # b was just served, a 10 s ago: both due back within a tool call's gap
    store_chain(epi, range(5000, 5010), tag="gone")  # a session seen once, then idle for an hour
    clock.now += 3600.0
    store_chain(epi, range(0, 104), tag="a")
    store_chain(epi, range(1000, 1104), tag="b")
    assert evict(epi) == key(5009)  # the session idle for an hour goes first, tail first
    assert evict(epi) == key(5008)


def test_epicache_bypasses_a_block_after_a_hole_once_the_tier_is_full() -> None:
    epi, _ = _learnt_returns(bypass="holes")
    assert epi.admit(key(9000), 1, BlockHint("c", key(103), 104))  # not full yet: everything is admitted
    victim = evict(epi)  # the tier is full from here; the victim's child would follow a hole
    assert victim not in epi
    assert not epi.admit(key(9001), 1, BlockHint("a", victim, 200))
    assert not epi.admit(key(9002), 1, BlockHint("a", key(9001), 201))  # and so would its child
    assert epi.admit(key(9003), 1, BlockHint("a", key(0), 1))  # a held parent: admitted
    assert epi.admit(key(9004), 1, BlockHint("a", None, 0))  # a prompt's first block: admitted
    off = EpiCachePolicy(EpiCacheConfig(bypass="off"))
    store_chain(off, range(0, 4), tag="a")
    gone = evict(off)
    assert off.admit(key(9001), 1, BlockHint("a", gone, 4))


def test_epicache_tag_overrides_the_prefix_tree() -> None:
    epi = EpiCachePolicy()
    epi.insert(key(1), 1, BlockHint("s1", None, 0))
    epi.insert(key(2), 1, BlockHint("s2", key(1), 1))  # other session, although it extends key(1)
    epi.insert(key(3), 1, BlockHint(None, key(2), 2))  # no tag: joins its parent's episode (s2)
    assert epi._blocks[key(3)][0] == epi._blocks[key(2)][0] != epi._blocks[key(1)][0]


def test_episode_clusters_tag_similar_texts_alike() -> None:
    import numpy as np
    from lifeboatcache_policy_epicache.clusters import EpisodeClusters

    clusters = EpisodeClusters(4, threshold=0.9, max_topics=2)
    a = clusters.tag_for(np.array([1.0, 0.0, 0.0, 0.0]))
    assert clusters.tag_for(np.array([0.99, 0.05, 0.0, 0.0])) == a
    b = clusters.tag_for(np.array([0.0, 1.0, 0.0, 0.0]))
    assert b != a
    c = clusters.tag_for(np.array([0.0, 0.0, 1.0, 0.0]))  # a third topic replaces the least recent (a)
    assert c not in (a, b) and clusters.tag_for(np.array([0.0, 1.0, 0.0, 0.0])) == b
