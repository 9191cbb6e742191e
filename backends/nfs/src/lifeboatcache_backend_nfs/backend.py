"""NFS tier: the core file tier (same layout, same block files) with NFS-safe behaviour.

What differs from ``FileBackend`` and why:

- The mount point is never created: a missing path or a path that is not (or no longer) an
  NFS mount means the export is not mounted, and writing there would silently fill the local
  disk. Both are probe failures with the reason ("... is on ext4, not NFS").
- No O_DIRECT by default (inherited default; many NFS clients handle it poorly). Temp names
  are unique per host+pid (``<final>.<host>-<pid>-<rand>.partial``) and land by ``rename``, which
  is atomic on the server: two writers of one key on several hosts both leave a valid block.
  Dead writers' partials are swept on other hosts once ``stale_partial_seconds`` old.
- ``ESTALE``/``EIO``/``ETIMEDOUT`` (a remounted export, a dying server, a ``soft`` mount's
  timeout) are misses. The backend then *suspends*: further operations fail fast, so the tier
  reaches ``unhealthy_after`` at once and is re-probed with backoff instead of piling threads
  onto a sick server; a passing probe resumes it.
- ``op_timeout_s`` (off by default) bounds each operation on a ``hard`` mount, where the kernel
  itself never times out: operations run on helper threads and a late one is abandoned. Reads
  then land in a private buffer first (one copy), so an abandoned read can never write into a
  caller's buffer after the caller was told "miss", and writes take a copy of what they store.
  Prefer ``soft,timeo=...`` mounts.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

import xxhash
from lifeboatcache_backend_file.backend import FileBackend, FileConfig
from lifeboatcache_core.abc import Backend, PayloadSink, StreamEncoder
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.config import default_cache_dir
from lifeboatcache_core.errors import TierUnavailableError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import sqlite_url
from pydantic import Field

log = logging.getLogger("lifeboatcache.nfs")

T = TypeVar("T")
#: errors that mean the server or the mount is sick, not that one block is bad
SICK_ERRNOS = frozenset({errno.ESTALE, errno.EIO, errno.ETIMEDOUT, errno.ENOTCONN, errno.EREMOTEIO})
NFS_TYPES = frozenset({"nfs", "nfs4"})


class NFSConfig(FileConfig):
    #: refuse a path that is not on an NFS mount (set false to use a local path, e.g. in tests)
    require_nfs_mount: bool = True
    #: bound each operation (hard mounts); None leaves timeouts to the mount (``soft,timeo=``)
    op_timeout_s: float | None = Field(default=None, gt=0)
    #: helper threads for ``op_timeout_s``
    op_threads: int = Field(default=16, ge=1, le=256)


class NFSBackend(FileBackend):
    persistent = True
    config_model = NFSConfig

    def __init__(self, config: NFSConfig, *, tier: str = "nfs") -> None:
        self._check_mount(Path(config.path), config.require_nfs_mount)  # before FileBackend mkdirs
        super().__init__(config, tier=tier)
        self.config: NFSConfig = config
        self._suspended: str | None = None
        self._state_lock = threading.Lock()
        self._ops = (ThreadPoolExecutor(config.op_threads, thread_name_prefix=f"lifeboat-{tier}-op")
                     if config.op_timeout_s else None)

    # ------------------------------------------------------------------ mount checks

    @staticmethod
    def _check_mount(root: Path, require_nfs: bool) -> None:
        if not root.is_dir():
            raise TierUnavailableError(f"{root} does not exist: is the NFS export mounted there?")
        if require_nfs:
            mountpoint, fstype = mount_of(root)
            if fstype not in NFS_TYPES:
                raise TierUnavailableError(
                    f"{root} is on {fstype} (mount point {mountpoint}), not NFS: the export is not mounted; "
                    f"mount it, or set require_nfs_mount = false to use a local path"
                )

    # ------------------------------------------------------------------ failure handling

    def _run(self, op: str, fn: Callable[[], T]) -> T:
        """Run one operation: fail fast while suspended, bound it in time, suspend on sick errors."""
        reason = self._suspended
        if reason is not None:
            raise OSError(errno.EIO, f"NFS tier suspended until the next probe passes ({reason})")
        try:
            if self._ops is None:
                return fn()
            future = self._ops.submit(fn)
            try:
                return future.result(self.config.op_timeout_s)
            except FutureTimeout:
                raise OSError(errno.ETIMEDOUT, f"{op} did not finish in {self.config.op_timeout_s}s: "
                                               f"NFS server not responding") from None
        except OSError as exc:
            if exc.errno in SICK_ERRNOS:
                self._suspend(f"{op}: {exc.strerror or exc}")
            raise

    def _suspend(self, reason: str) -> None:
        with self._state_lock:
            if self._suspended is None:
                log.warning("tier %s: %s; suspending until a probe passes", self.tier, reason)
            self._suspended = reason
        with self._dirs_lock:
            self._dirs.clear()  # directory handles may be stale: look them up again

    # ------------------------------------------------------------------ operations

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        if self._ops is not None:  # an abandoned write must not read the pieces once they are lent back
            payload = [bytes(p) for p in payload]
        return self._run(f"write {key.hex[:16]}", lambda: FileBackend.put(self, key, payload, meta))

    def put_stream(self, key: BlockKey, encoder: StreamEncoder,
                   finish: Callable[[Sequence[Buffer], dict[str, Any]], BlockMeta | None]) -> int | None:
        """Coded whole, then ``put``: one bounded operation, as every operation here is."""
        return Backend.put_stream(self, key, encoder, finish)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        if self._ops is None or dest is None:
            return self._run(f"read {key.hex[:16]}", lambda: FileBackend.read(self, key, dest))
        meta, payload = self._run(f"read {key.hex[:16]}", lambda: FileBackend.read(self, key, None))
        if payload.nbytes != dest.nbytes:
            return meta, payload
        dest[:] = payload  # an abandoned read never touches the caller's buffer (see module doc)
        return meta, dest

    def read_payload(self, key: BlockKey, sink: PayloadSink,
                     stored_size: int | None = None) -> tuple[BlockMeta, int]:
        """A coding tier's read, bounded and suspended like every other operation here. With
        deadlines the block is read whole into a private buffer (``read``) and only then handed to
        ``sink``, on the caller's thread: an abandoned read never decodes into the caller's buffer."""
        if self._ops is not None:
            return Backend.read_payload(self, key, sink, stored_size)
        return self._run(f"read {key.hex[:16]}", lambda: FileBackend.read_payload(self, key, sink, stored_size))

    def exists(self, key: BlockKey) -> bool:
        return self._run(f"stat {key.hex[:16]}", lambda: FileBackend.exists(self, key))

    def delete(self, key: BlockKey) -> int:
        return self._run(f"unlink {key.hex[:16]}", lambda: FileBackend.delete(self, key))

    def quarantine(self, key: BlockKey, reason: str) -> None:
        self._run(f"quarantine {key.hex[:16]}", lambda: FileBackend.quarantine(self, key, reason))

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        # A listing is one long operation; list eagerly so the deadline and errors apply to it.
        yield from self._run("scan", lambda: list(FileBackend.scan(self)))

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        self._run("namespace description", lambda: FileBackend.describe_namespace(self, namespace, info))

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        return self._run(f"read header {key.hex[:16]}", lambda: FileBackend.read_header(self, key))

    def list_keys(self) -> Iterator[BlockKey]:
        yield from self._run("list", lambda: list(FileBackend.list_keys(self)))

    def default_manifest_url(self) -> str:
        """On local disk, never on the export: SQLite's locking (and WAL) does not work over NFS."""
        where = xxhash.xxh3_64_hexdigest(os.path.realpath(self.root).encode())
        directory = default_cache_dir() / "manifests"
        directory.mkdir(parents=True, exist_ok=True)
        return sqlite_url(directory / f"nfs-{self.root.name}-{where}.sqlite")

    def probe(self) -> None:
        """Mount checks, then the file tier's write/read/delete probe; a pass resumes the tier."""
        self._check_mount(self.root, self.config.require_nfs_mount)
        try:
            if self._ops is None:
                FileBackend.probe(self)
            else:
                self._ops.submit(FileBackend.probe, self).result(self.config.op_timeout_s)
        except FutureTimeout:
            raise TierUnavailableError(
                f"{self.root}: probe did not finish in {self.config.op_timeout_s}s: NFS server not responding"
            ) from None
        with self._state_lock:
            if self._suspended is not None:
                log.info("tier %s: probe passed, resuming (was: %s)", self.tier, self._suspended)
            self._suspended = None

    def close(self) -> None:
        if self._ops is not None:
            self._ops.shutdown(wait=False, cancel_futures=True)
        super().close()


def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding ``path``, from /proc/self/mounts."""
    target = os.path.realpath(path)
    best, fstype = "/", "unknown"
    try:
        with open("/proc/self/mounts") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return best, fstype
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fstype = point, fields[2]
    return best, fstype
