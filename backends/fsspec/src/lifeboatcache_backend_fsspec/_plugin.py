"""Entry point of ``lifeboatcache-backend-fsspec``: registers strings only (fsspec is not imported)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend(
        "fsspec",
        "lifeboatcache_backend_fsspec.backend:FsspecBackend",
        config="lifeboatcache_backend_fsspec.config:FsspecConfig",
        requires=["fsspec>=2024.2"],
        extra="fsspec",
    )
