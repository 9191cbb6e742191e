"""Registers the ``epicache`` eviction policy by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_policies(register):  # type: ignore[no-untyped-def]
    register.policy("epicache", "lifeboatcache_policy_epicache.policy:EpiCachePolicy",
                    config="lifeboatcache_policy_epicache.policy:EpiCacheConfig", extra="epicache")
