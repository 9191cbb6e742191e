"""fsspec tier: blocks in the core block format under any fsspec URL.

Layout (as the file tier)::

    <root>/<namespace>/<ab>/<digest-hex>.lbk     blocks
    <root>/<namespace>/NAMESPACE.json            namespace source
    <root>/.bad/<namespace>/<digest-hex>.<t>.lbk quarantined blocks

A block becomes visible whole or not at all: on file systems it is written to a unique
``.partial`` beside its final name and moved into place; on object stores (and memory://) the
single whole-object write is already atomic. Reads stream header, payload (into the caller's
buffer) and trailer through ``read_block_stream``. Errors an implementation raises that are
not ``OSError`` are turned into ``OSError`` so the tier counts them as I/O failures (misses).
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import fsspec
from lifeboatcache_core.abc import Backend
from lifeboatcache_core.chunkfile import (
    BlockMeta,
    Buffer,
    encode_block,
    parse_fixed,
    parse_header,
    read_block_stream,
)
from lifeboatcache_core.errors import LifeboatError, TierUnavailableError
from lifeboatcache_core.keys import BlockKey

from lifeboatcache_backend_fsspec.config import FsspecConfig

SUFFIX = ".lbk"
HEAD_READ = 4096
PARTIAL = ".partial"
#: protocols whose files are written in place (so a temp name + move makes the write atomic)
RENAME_PROTOCOLS = frozenset({"file", "local", "sftp", "ssh", "smb", "hdfs", "webhdfs", "nfs", "dbfs"})
_HOST = socket.gethostname()
_CREDENTIALS_IN_URL = re.compile(r"//[^/@]*@")
T = TypeVar("T")


def public_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages."""
    return _CREDENTIALS_IN_URL.sub("//***@", url)


class FsspecBackend(Backend):
    persistent = True  # memory:// is not, but is meant for tests only
    config_model = FsspecConfig

    def __init__(self, config: FsspecConfig, *, tier: str = "fsspec") -> None:
        super().__init__(config, tier=tier)
        self.config: FsspecConfig = config
        self.url = public_url(config.url)
        try:
            self.fs, root = fsspec.core.url_to_fs(config.url, **config.storage_options)
        except (ImportError, ValueError) as exc:  # "Install gcsfs to access ...", unknown protocol
            raise TierUnavailableError(f"{self.url}: {exc}") from exc
        self.root = root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        mode = config.write_mode
        self._rename = mode == "rename" or (mode == "auto" and bool(RENAME_PROTOCOLS.intersection(protocols)))
        self._dirs: set[str] = set()
        self._dirs_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers

    def path_of(self, key: BlockKey) -> str:
        h = key.hex
        return f"{self.root}/{key.namespace}/{h[0:2]}/{h}{SUFFIX}"

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Missing → KeyError; anything else not already OSError/LifeboatError → OSError."""
        try:
            return fn()
        except FileNotFoundError:
            raise KeyError(what) from None
        except (OSError, LifeboatError):
            raise
        except Exception as exc:
            raise OSError(errno.EIO, f"{self.url}: {what}: {type(exc).__name__}: {exc}") from exc

    def _makedirs(self, directory: str) -> None:
        if directory in self._dirs:
            return
        self.fs.makedirs(directory, exist_ok=True)
        with self._dirs_lock:
            self._dirs.add(directory)

    def _write(self, path: str, data: bytes) -> None:
        if not self._rename:
            self.fs.pipe_file(path, data)
            return
        self._makedirs(path.rpartition("/")[0])
        tmp = f"{path}.{_HOST}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
        self.fs.pipe_file(tmp, data)
        try:
            self.fs.mv(tmp, path)
        except BaseException:
            try:
                self.fs.rm_file(tmp)
            except Exception:  # best effort; a stale partial is ignored by scan
                pass
            raise

    # ------------------------------------------------------------------ Backend

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        blob = b"".join(encode_block(meta, payload))
        path = self.path_of(key)
        self._call(path, lambda: self._write(path, blob))
        return len(blob)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        path = self.path_of(key)

        def read() -> tuple[BlockMeta, memoryview]:
            with self.fs.open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(0)
                return read_block_stream(fh.readinto, size, key, dest)

        return self._call(path, read)

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        """Meta and stored size from the first 4 KiB (restart recovery)."""
        path = self.path_of(key)

        def read() -> tuple[BlockMeta, int]:
            with self.fs.open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(0)
                head = fh.read(HEAD_READ)
                header_len = parse_fixed(head)[0]
                if header_len > len(head) and header_len <= size:
                    head += fh.read(header_len - len(head))
                return parse_header(head, size, key).meta, size

        return self._call(path, read)

    def exists(self, key: BlockKey) -> bool:
        path = self.path_of(key)
        return bool(self._call(path, lambda: self.fs.exists(path)))

    def delete(self, key: BlockKey) -> int:
        path = self.path_of(key)

        def delete() -> int:
            size = int(self.fs.size(path))
            self.fs.rm_file(path)
            return size

        try:
            return self._call(path, delete)
        except KeyError:
            return 0

    def quarantine(self, key: BlockKey, reason: str) -> None:
        path = self.path_of(key)
        if self.config.on_corrupt == "delete":
            self.delete(key)
            return
        bad_dir = f"{self.root}/.bad/{key.namespace}"

        def move() -> None:
            if self._rename:
                self._makedirs(bad_dir)
            self.fs.mv(path, f"{bad_dir}/{key.hex}.{time.time_ns()}{SUFFIX}")

        try:
            self._call(path, move)
        except KeyError:
            pass

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        found = self._call(self.root, lambda: self.fs.find(self.root, detail=True))
        prefix = f"{self.root}/"
        for path, info in found.items():
            parts = path[len(prefix):].split("/") if path.startswith(prefix) else []
            if len(parts) != 3 or parts[0].startswith(".") or not parts[2].endswith(SUFFIX):
                continue
            try:
                yield BlockKey.from_hex(parts[0], parts[2][: -len(SUFFIX)]), int(info["size"])
            except ValueError:
                continue

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        path = f"{self.root}/{namespace}/NAMESPACE.json"
        if not self._call(path, lambda: self.fs.exists(path)):
            body = json.dumps(info, indent=1, sort_keys=True).encode()
            self._call(path, lambda: self._write(path, body))

    def probe(self) -> None:
        path = f"{self.root}/.probe/{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        data = secrets.token_bytes(1024)
        try:
            self._call(path, lambda: self._write(path, data))
            try:
                got = self._call(path, lambda: self.fs.cat_file(path))
            finally:
                self._call(path, lambda: self.fs.rm_file(path))
        except (OSError, KeyError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            raise TierUnavailableError(f"{self.url}: probe failed: {reason}") from exc
        if got != data:
            raise TierUnavailableError(f"{self.url}: probe read back different bytes")

    def close(self) -> None:
        """fsspec caches filesystem instances process-wide; nothing of ours to release."""
