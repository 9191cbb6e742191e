"""Entry point of ``lifeboatcache-backend-s3``: registers strings only (nothing imports boto3 here)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_backends(register):  # type: ignore[no-untyped-def]
    register.backend(
        "s3",
        "lifeboatcache_backend_s3.backend:S3Backend",
        config="lifeboatcache_backend_s3.config:S3Config",
        requires=["boto3>=1.36"],
        extra="s3",
    )
