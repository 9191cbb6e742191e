from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_policies(register):  # type: ignore[no-untyped-def]
    register.policy("lru", "lifeboatcache_core.builtin.lru:LRUPolicy")
