"""Entry point of ``lifeboatcache-backend-ontap``: registers strings only."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend(
        "ontap",
        "lifeboatcache_backend_ontap.backend:OntapBackend",
        config="lifeboatcache_backend_ontap.config:OntapConfig",
        requires=["netapp-ontap>=9.14"],
        extra="ontap",
    )
