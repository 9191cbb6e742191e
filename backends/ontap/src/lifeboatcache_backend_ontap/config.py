"""Options of an ``ontap`` tier (pydantic only: validates without netapp-ontap installed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from lifeboatcache_core.abc import PluginConfig
from pydantic import Field, SecretStr, model_validator

ENV_USER = "ONTAP_USERNAME"
ENV_PASSWORD = "ONTAP_PASSWORD"


class OntapConfig(PluginConfig):
    """An ONTAP volume mounted over NFS, or an ONTAP S3 bucket, as a tier.

    The REST API (``cluster``) is used to check the storage side; blocks travel over the
    data path (the ``nfs`` or ``s3`` backend, configured by ``protocol_options``). Credentials
    default to ``$ONTAP_USERNAME``/``$ONTAP_PASSWORD`` and are never logged.
    """

    cluster: str = Field(description="management address: host, host:port or https://host:port")
    username: str | None = None
    password: SecretStr | None = None
    verify_tls: bool = True
    svm: str
    volume: str
    protocol: Literal["nfs", "s3"] = "nfs"
    #: nfs: where this host mounts the volume
    path: Path | None = None
    #: s3: the ONTAP S3 bucket and the key prefix inside it
    bucket: str | None = None
    prefix: str = "lifeboat"
    #: this host's address as the export policy sees it (default: the route to the NFS server)
    client_address: str | None = None
    min_free_gb: float = Field(default=1.0, ge=0)
    create_volume: bool = False
    create_size_gb: float = Field(default=1024.0, gt=0)
    aggregate: str | None = None
    request_timeout_s: float = Field(default=10.0, gt=0)
    #: options of the data-path backend (``nfs``: op_timeout_s, durability, ...; ``s3``:
    #: endpoint_url, region, ...), validated against that backend's own config model
    protocol_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _protocol_needs(self) -> OntapConfig:
        if self.protocol == "nfs" and self.path is None:
            raise ValueError("protocol = 'nfs' needs `path`: where this host mounts the volume")
        if self.protocol == "s3" and not self.bucket:
            raise ValueError("protocol = 's3' needs `bucket`: the ONTAP S3 bucket to use")
        if self.create_volume and not self.aggregate:
            raise ValueError("create_volume = true needs `aggregate`: where ONTAP should create the volume")
        self.delegate_config()  # unknown or invalid protocol_options fail at config time
        return self

    def delegate_options(self) -> dict[str, Any]:
        if self.protocol == "nfs":
            return {**self.protocol_options, "path": str(self.path)}
        prefix = self.prefix.strip("/")
        return {**self.protocol_options, "url": f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"}

    def delegate_config(self) -> PluginConfig:
        from lifeboatcache_core.plugins import get_registry

        model = get_registry().config_model("backend", self.protocol)
        return model.model_validate(self.delegate_options())  # type: ignore[no-any-return]

    def credentials(self) -> tuple[str | None, str | None]:
        user = self.username or os.environ.get(ENV_USER)
        password = self.password.get_secret_value() if self.password else os.environ.get(ENV_PASSWORD)
        return user, password
