"""Every first-party policy passes the core PolicyContract, loaded by name through the registry."""

from __future__ import annotations

from lifeboatcache_core.abc import EvictionPolicy
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_core.testing.contracts import PolicyContract


def _load(name: str, seed: int) -> EvictionPolicy:
    return get_registry().load("policy", name)(None, seed=seed)  # type: ignore[no-any-return]


class TestARC(PolicyContract):
    def make_policy(self, seed: int = 0) -> EvictionPolicy:
        return _load("arc", seed)


class TestScore(PolicyContract):
    def make_policy(self, seed: int = 0) -> EvictionPolicy:
        return _load("score", seed)


class TestEpiCache(PolicyContract):
    """The default: gaps in ``time.monotonic`` seconds, as in a tier."""

    def make_policy(self, seed: int = 0) -> EvictionPolicy:
        return _load("epicache", seed)

    def test_deterministic_with_seed(self) -> None:
        # With a seconds clock the victims depend on when operations happen; given the same
        # clock readings they must be the same.
        def stepped(seed: int) -> EvictionPolicy:
            policy = self.make_policy(seed)
            ticks = iter(range(1 << 30))
            policy.clock = lambda: next(ticks) * 0.5  # type: ignore[attr-defined]
            return policy

        a = self._simulate(stepped(7), 3000, 300, 40, seed=2)
        b = self._simulate(stepped(7), 3000, 300, 40, seed=2)
        assert a == b


class TestEpiCacheOperationsClock(PolicyContract):
    """``clock="operations"``: the whole contract, determinism included, with no clock at all."""

    def make_policy(self, seed: int = 0) -> EvictionPolicy:
        from lifeboatcache_policy_epicache.policy import EpiCacheConfig

        return get_registry().load("policy", "epicache")(EpiCacheConfig(clock="operations"), seed=seed)  # type: ignore[no-any-return]
