"""What each policy is for, on small hand-made sequences a tier would produce."""

from __future__ import annotations

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
    epi = EpiCachePolicy(EpiCacheConfig(patience=2.0))
    for _turn in range(6):  # two sessions, alternating; then only B keeps coming
        store_chain(epi, range(0, 8))
        store_chain(epi, range(100, 108))
    for _turn in range(6):
        store_chain(epi, range(100, 108))
    # A is cold: all of A goes before any of B, deepest block first
    victims = [evict(epi) for _ in range(8)]
    assert victims == [key(i) for i in range(7, -1, -1)]


def test_epicache_returning_session_keeps_its_prefix() -> None:
    epi = EpiCachePolicy()
    store_chain(epi, range(0, 20), tag="a")
    store_chain(epi, range(100, 120), tag="b")
    store_chain(epi, range(0, 20), tag="a")
    for _ in range(10):
        evict(epi)
    assert all(key(i) in epi for i in range(10)) and all(key(100 + i) in epi for i in range(10))


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
