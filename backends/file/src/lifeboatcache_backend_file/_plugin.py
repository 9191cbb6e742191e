"""Entry point of ``lifeboatcache-backend-file``: registers strings only."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend("file", "lifeboatcache_backend_file.backend:FileBackend", extra="file")
