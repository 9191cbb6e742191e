from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_manifests(register):  # type: ignore[no-untyped-def]
    register.manifest("sqlite", "lifeboatcache_core.manifest:Manifest")
