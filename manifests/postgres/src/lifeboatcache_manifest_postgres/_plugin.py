"""Entry point of ``lifeboatcache-manifest-postgres``: registers strings only (psycopg is not imported)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_manifests(register):  # type: ignore[no-untyped-def]
    register.manifest(
        "postgresql",
        "lifeboatcache_manifest_postgres.store:PostgresManifest",
        requires=["psycopg[binary]>=3.1"],
        extra="postgresql",
    )
