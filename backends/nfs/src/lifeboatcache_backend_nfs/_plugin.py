"""Entry point of ``lifeboatcache-backend-nfs``: registers strings only."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend("nfs", "lifeboatcache_backend_nfs.backend:NFSBackend", extra="nfs")
