"""Registers the ``score`` eviction policy by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_policies(register):  # type: ignore[no-untyped-def]
    register.policy("score", "lifeboatcache_policy_score.policy:ScorePolicy",
                    config="lifeboatcache_policy_score.policy:ScoreConfig", extra="score")
