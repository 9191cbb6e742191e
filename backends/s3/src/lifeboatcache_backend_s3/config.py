"""Options of an ``s3`` tier. Imports pydantic only, so a config validates without boto3."""

from __future__ import annotations

from typing import Literal

from lifeboatcache_core.abc import PluginConfig
from pydantic import Field, SecretStr, field_validator

MIB = 1024**2
#: S3's smallest multipart part (except the last one)
MIN_PART_MB = 5


class S3Config(PluginConfig):
    """Where the blocks go and how hard to try.

    Credentials come from boto3's normal chain (environment, ``profile``, instance role, ...);
    ``access_key_id``/``secret_access_key`` exist for S3-compatible stores configured in one
    file, are held as secrets and are never logged or shown.
    """

    url: str = Field(description="s3://bucket[/prefix]")
    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    #: blocks at least this large are sent as a multipart upload, parts in parallel
    multipart_threshold_mb: float = Field(default=64.0, ge=MIN_PART_MB)
    #: multipart part size, and the size of each parallel ranged GET of a large block
    part_size_mb: float = Field(default=16.0, ge=MIN_PART_MB)
    #: concurrent part uploads / ranged GETs for one large block
    parallel_parts: int = Field(default=4, ge=1, le=64)
    #: concurrent requests of one bulk call (read_many / write_many / delete_many, e.g. an eviction)
    parallel_requests: int = Field(default=16, ge=1, le=256)
    #: attempts per request, including the first (botocore "standard" retries: backoff + jitter)
    max_attempts: int = Field(default=3, ge=1, le=20)
    connect_timeout_s: float = Field(default=3.0, gt=0)
    read_timeout_s: float = Field(default=20.0, gt=0)
    max_pool_connections: int = Field(default=32, ge=1)
    on_corrupt: Literal["quarantine", "delete"] = "quarantine"

    @field_validator("url")
    @classmethod
    def _s3_url(cls, value: str) -> str:
        if not value.startswith("s3://") or not value[5:].split("/", 1)[0]:
            raise ValueError(f"url {value!r} must look like 's3://bucket' or 's3://bucket/prefix'")
        return value

    @property
    def bucket(self) -> str:
        return self.url[5:].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """Key prefix with a trailing slash, or '' for the bucket root."""
        rest = self.url[5:].partition("/")[2].strip("/")
        return f"{rest}/" if rest else ""

    @property
    def part_size(self) -> int:
        return int(self.part_size_mb * MIB)

    @property
    def multipart_threshold(self) -> int:
        return int(self.multipart_threshold_mb * MIB)
