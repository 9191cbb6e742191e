"""Registers the ``arc`` eviction policy by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_policies(register):  # type: ignore[no-untyped-def]
    register.policy("arc", "lifeboatcache_policy_arc.policy:ARCPolicy", extra="arc")
