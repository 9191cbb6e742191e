"""Registrar for the ``lifeboatcache`` entry-point group (import-light: strings only)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_adapters(register):  # type: ignore[no-untyped-def]
    register.adapter("lmcache", "lifeboatcache_lmcache.adapter:LMCacheAdapter", extra="lmcache",
                     requires=["lmcache>=0.5.6"])
