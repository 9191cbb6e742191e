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
    def make_policy(self, seed: int = 0) -> EvictionPolicy:
        return _load("epicache", seed)
