"""ONTAP tier: the storage side checked through the ONTAP REST API, the data on nfs or s3.

Blocks travel over the data path: the ``nfs`` backend on the host's mount of the volume, or
the ``s3`` backend on an ONTAP S3 bucket. Both are loaded through the plugin registry (never
imported), so this package only adds what ONTAP knows and a mount cannot tell: whether the
volume is online, where it is junctioned, whether its export policy admits this host
read-write, how much space is left, whether the bucket exists. Each failure is a tier reason
an operator can act on ("export policy 'default' of SVM 'svm1' denies 10.0.0.5").

REST resources used (netapp-ontap): ``Volume`` (GET/POST /api/storage/volumes, with the job
it returns polled at /api/cluster/jobs), ``ExportPolicy`` (GET
/api/protocols/nfs/export-policies), ``S3Bucket`` (GET /api/protocols/s3/buckets).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lifeboatcache_core.abc import Backend
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.errors import TierUnavailableError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.plugins import get_registry
from netapp_ontap import HostConnection
from netapp_ontap.error import NetAppRestError
from netapp_ontap.resources import ExportPolicy, S3Bucket, Volume

from lifeboatcache_backend_ontap.config import OntapConfig

log = logging.getLogger("lifeboatcache.ontap")

MOUNTS_FILE = "/proc/self/mounts"
GIB = 1024**3
NFS_TYPES = frozenset({"nfs", "nfs4"})
VOLUME_FIELDS = "uuid,name,state,svm.name,nas.path,nas.export_policy.name,space.size,space.available"


class OntapBackend(Backend):
    persistent = True
    config_model = OntapConfig

    def __init__(self, config: OntapConfig, *, tier: str = "ontap") -> None:
        super().__init__(config, tier=tier)
        self.config: OntapConfig = config
        self.where = f"ONTAP {config.cluster} SVM {config.svm!r} volume {config.volume!r}"
        self.connection = _connect(config)
        self._inner: Backend | None = None
        self._inner_cls: type[Backend] = get_registry().load("backend", config.protocol)

    # ------------------------------------------------------------------ data path

    @property
    def inner(self) -> Backend:
        """The nfs/s3 backend; created by the first probe that passes the ONTAP checks."""
        if self._inner is None:
            raise OSError(f"{self.where}: not probed yet")
        return self._inner

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        return self.inner.put(key, payload, meta)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        return self.inner.read(key, dest)

    def exists(self, key: BlockKey) -> bool:
        return self.inner.exists(key)

    def delete(self, key: BlockKey) -> int:
        return self.inner.delete(key)

    def quarantine(self, key: BlockKey, reason: str) -> None:
        self.inner.quarantine(key, reason)

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        return self.inner.scan()

    def list_keys(self) -> Iterator[BlockKey]:
        return self.inner.list_keys()

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        return self.inner.read_header(key)

    def default_manifest_url(self) -> str | None:
        return self.inner.default_manifest_url()

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        describe = getattr(self.inner, "describe_namespace", None)
        if describe is not None:
            describe(namespace, info)

    def free_bytes(self) -> int | None:
        return self.inner.free_bytes() if self._inner is not None else None

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    # ------------------------------------------------------------------ probe

    def probe(self) -> None:
        """ONTAP checks first (their reasons are the precise ones), then the data path's probe."""
        try:
            if self.config.protocol == "nfs":
                self._check_nfs_volume()
            else:
                self._check_bucket()
        except NetAppRestError as exc:
            raise TierUnavailableError(f"{self.where}: {rest_reason(exc, self.config)}") from exc
        if self._inner is None:
            self._inner = self._inner_cls(self.config.delegate_config(), tier=self.tier)
        self._inner.probe()

    def _check_nfs_volume(self) -> None:
        cfg = self.config
        volume = self._volume()
        if volume.get("state") != "online":
            raise TierUnavailableError(f"{self.where} is {volume.get('state', 'in an unknown state')}, not online")
        junction = volume.get("nas", {}).get("path")
        if not junction:
            raise TierUnavailableError(f"{self.where} has no junction path: mount it in the SVM namespace "
                                       f"(volume modify -junction-path)")
        assert cfg.path is not None
        mount = mount_of(cfg.path)
        if mount is None or mount[2] not in NFS_TYPES:
            found = f"{mount[2]} at {mount[1]}" if mount else "no mount"
            raise TierUnavailableError(f"{self.where}: {cfg.path} is not an NFS mount ({found}); "
                                       f"mount <data LIF>:{junction} there")
        source, _point, _type = mount
        exported = source.partition(":")[2] or source
        if exported.rstrip("/") != junction.rstrip("/") and not exported.startswith(junction.rstrip("/") + "/"):
            raise TierUnavailableError(f"{self.where} is junctioned at {junction}, but {cfg.path} mounts {source}")
        policy = volume.get("nas", {}).get("export_policy", {}).get("name", "default")
        self._check_export_policy(policy, self._client_address(source))
        self._check_space(volume)

    def _volume(self) -> dict[str, Any]:
        cfg = self.config
        found = [v.to_dict() for v in Volume.get_collection(
            connection=self.connection, fields=VOLUME_FIELDS, **{"svm.name": cfg.svm, "name": cfg.volume})]
        if found:
            return found[0]
        if not cfg.create_volume:
            raise TierUnavailableError(f"{self.where} does not exist: create it, or set create_volume = true "
                                       f"(with `aggregate`)")
        return self._create_volume()

    def _create_volume(self) -> dict[str, Any]:
        cfg = self.config
        log.warning("tier %s: creating %s (%s GiB on aggregate %s)", self.tier, self.where, cfg.create_size_gb,
                    cfg.aggregate)
        volume = Volume.from_dict({
            "name": cfg.volume,
            "svm": {"name": cfg.svm},
            "aggregates": [{"name": cfg.aggregate}],
            "size": int(cfg.create_size_gb * GIB),
            "nas": {"path": f"/{cfg.volume}"},
        })
        volume.set_connection(self.connection)
        volume.post(hydrate=False, poll=True, poll_interval=1, poll_timeout=int(cfg.request_timeout_s * 6))
        found = [v.to_dict() for v in Volume.get_collection(
            connection=self.connection, fields=VOLUME_FIELDS, **{"svm.name": cfg.svm, "name": cfg.volume})]
        if not found:
            raise TierUnavailableError(f"{self.where}: created, but the cluster does not list it")
        return found[0]

    def _check_export_policy(self, name: str, client: str) -> None:
        policies = [p.to_dict() for p in ExportPolicy.get_collection(
            connection=self.connection, fields="name,rules", **{"svm.name": self.config.svm, "name": name})]
        if not policies:
            raise TierUnavailableError(f"export policy {name!r} of SVM {self.config.svm!r} does not exist")
        verdict = export_verdict(policies[0].get("rules", []), client)
        if verdict != "rw":
            how = "gives read-only access to" if verdict == "ro" else "denies"
            raise TierUnavailableError(
                f"export policy {name!r} of SVM {self.config.svm!r} {how} {client}: add a rule with clients "
                f"matching {client} and rw_rule 'any' (or set client_address if this host appears as another address)"
            )

    def _check_space(self, volume: dict[str, Any]) -> None:
        available = volume.get("space", {}).get("available")
        if available is not None and available < self.config.min_free_gb * GIB:
            raise TierUnavailableError(
                f"{self.where} has {available / GIB:.1f} GiB free, below min_free_gb = {self.config.min_free_gb}: "
                f"grow the volume or free space"
            )

    def _check_bucket(self) -> None:
        cfg = self.config
        buckets = list(S3Bucket.get_collection(connection=self.connection, fields="name,svm.name,volume.name",
                                               **{"svm.name": cfg.svm, "name": cfg.bucket}))
        if not buckets:
            raise TierUnavailableError(f"ONTAP {cfg.cluster} SVM {cfg.svm!r} has no S3 bucket {cfg.bucket!r}: "
                                       f"create it (vserver object-store-server bucket create)")

    def _client_address(self, mount_source: str) -> str:
        """This host's address toward the NFS server (what the export policy sees)."""
        if self.config.client_address:
            return self.config.client_address
        server = mount_source.partition(":")[0].strip("[]")
        try:
            with socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((server, 2049))  # UDP connect: picks the route, sends nothing
                return str(s.getsockname()[0])
        except OSError:
            return socket.gethostname()


# ----------------------------------------------------------------------------- helpers


def _connect(cfg: OntapConfig) -> HostConnection:
    url = urlsplit(cfg.cluster if "://" in cfg.cluster else f"https://{cfg.cluster}")
    scheme = url.scheme or "https"
    port = url.port or (443 if scheme == "https" else 80)
    user, password = cfg.credentials()
    timeout = cfg.request_timeout_s
    return HostConnection(url.hostname or cfg.cluster, username=user, password=password, verify=cfg.verify_tls,
                          port=port, scheme=scheme, protocol_timeouts=(timeout, timeout), poll_interval=1)


def rest_reason(exc: NetAppRestError, cfg: OntapConfig) -> str:
    """An ONTAP REST failure in operator terms (no password in it)."""
    status = exc.status_code
    user = cfg.credentials()[0]
    if status == 401:
        return f"the cluster rejected the credentials of user {user!r} (HTTP 401): check username/password"
    if status == 403:
        return f"user {user!r} may not read this through the REST API (HTTP 403): grant it a role that can"
    body = exc.response_body or {}
    message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    if status is not None:
        return f"REST API answered HTTP {status}{': ' + message if message else ''}"
    cause = getattr(exc, "cause", None)
    return f"cannot reach the cluster's REST API at {cfg.cluster}: {type(cause).__name__ if cause else exc}"


def mount_of(path: Path) -> tuple[str, str, str] | None:
    """(source, mount point, filesystem type) of the mount that holds ``path``."""
    target = str(Path(path).resolve())
    best: tuple[str, str, str] | None = None
    try:
        with open(MOUNTS_FILE) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        source, point, fstype = (f.replace("\\040", " ") for f in fields[:3])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):
            best = (source, point, fstype)
    return best


def export_verdict(rules: list[dict[str, Any]], client: str) -> str:
    """"rw", "ro" or "none": what the first rule (by index) matching ``client`` grants over NFS."""
    for rule in sorted(rules, key=lambda r: r.get("index", 0)):
        protocols = set(rule.get("protocols") or ["any"])
        if not protocols & {"any", "nfs", "nfs3", "nfs4", "nfs41"}:
            continue
        if any(_client_matches(c.get("match", ""), client) for c in rule.get("clients", [])):
            if "never" in (rule.get("ro_rule") or ["never"]):
                return "none"
            return "ro" if "never" in (rule.get("rw_rule") or ["never"]) else "rw"
    return "none"


def _client_matches(match: str, client: str) -> bool:
    """ONTAP client match forms: IP, subnet (CIDR), host name, ``.domain`` suffix."""
    if not match:
        return False
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        address = None
    if address is not None:
        try:
            return address in ipaddress.ip_network(match, strict=False)
        except ValueError:
            pass
    if match.startswith("."):
        return client.endswith(match)
    return match == client
