"""EpiCache's return-time estimate, the one predictive staging uses when no hint is given."""

from __future__ import annotations

import os
from pathlib import Path

from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import GB, load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.staging import ReturnEstimator
from lifeboatcache_core.testing.contracts import key
from lifeboatcache_policy_epicache.policy import EpiCacheConfig, EpiCachePolicy

from tests.policies.test_behaviour import FakeClock


def visit(policy: EpiCachePolicy, tag: str, keys: list[BlockKey]) -> None:
    for i, k in enumerate(keys):
        if k in policy:
            policy.touch(k)
        else:
            policy.insert(k, 1, BlockHint(tag=tag, depth=i))


def test_the_estimate_is_the_last_visit_plus_the_learnt_gap() -> None:
    epi = EpiCachePolicy()
    epi.clock = clock = FakeClock()
    assert isinstance(epi, ReturnEstimator)
    assert epi.expected_return("a") is None  # unknown session
    a = [key(i) for i in range(3)]
    for t in (0.0, 10.0, 20.0, 30.0):  # a comes back every 10 s; b runs in between (a visit ends)
        clock.now = t
        visit(epi, "a", a)
        visit(epi, "b", [key(100)])
    estimate = epi.expected_return("a")
    assert estimate is not None and 30.0 < estimate < 45.0, estimate
    assert EpiCachePolicy(EpiCacheConfig(clock="operations")).expected_return("a") is None


def test_a_tier_with_epicache_stages_a_session_it_expects_back(tmp_path: Path) -> None:
    data = {"tiers": [{"name": "dram", "backend": "dram", "capacity_gb": 64 * 4096 / GB, "stage": True},
                      {"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tmp_path / "t"),
                       "policy": "epicache"}],
            "fallback_local": {"path": str(tmp_path / "fb"), "capacity_gb": 1}}
    with TieredCache(load_config_dict(data), background_index=False) as cache:
        ks = [BlockKey("ns", i.to_bytes(8, "big") * 4) for i in range(4)]
        cache.put(ks, [os.urandom(4096) for _ in ks], hints=[BlockHint(tag="a", depth=i) for i in range(4)])
        cache.all_tiers[0].discard(ks)
        assert cache.all_tiers[1].policy.expected_return("a") is not None
        cache.stager.lead_s = 3600.0  # whatever EpiCache's first guess of the gap, it is due now
        cache.stager.wake()
        assert cache.stager.wait_idle(30)
        assert all(cache.all_tiers[0].presence(k) for k in ks)
