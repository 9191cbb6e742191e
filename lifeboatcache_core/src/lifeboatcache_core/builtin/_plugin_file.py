from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend("file", "lifeboatcache_core.builtin.file:FileBackend")
