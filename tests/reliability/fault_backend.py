"""A fault-injecting wrapper backend, registered by name through a throwaway plugin.

It wraps the real file backend and, while ``fault`` is set, fails the way a dying disk or a
flaky network filesystem does (EIO on every call). The code under test is untouched: the
tier talks to this backend exactly as to any other.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator, Sequence
from typing import Any

from lifeboatcache_backend_file.backend import FileBackend, FileConfig
from lifeboatcache_core.abc import Backend
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.hookspecs import hookimpl
from lifeboatcache_core.keys import BlockKey

NAME = "faulty-file"


class FaultyFileBackend(Backend):
    persistent = True
    config_model = FileConfig

    def __init__(self, config: FileConfig, *, tier: str = NAME) -> None:
        super().__init__(config, tier=tier)
        self.inner = FileBackend(config, tier=tier)
        self.fault: str | None = None  # "eio": every call fails with EIO
        self.calls_failed = 0

    def _check(self, what: str) -> None:
        if self.fault == "eio":
            self.calls_failed += 1
            raise OSError(errno.EIO, "Input/output error", f"{self.inner.root} ({what}, injected)")

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        self._check("put")
        return self.inner.put(key, payload, meta)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        self._check("read")
        return self.inner.read(key, dest)

    def exists(self, key: BlockKey) -> bool:
        self._check("exists")
        return self.inner.exists(key)

    def delete(self, key: BlockKey) -> int:
        self._check("delete")
        return self.inner.delete(key)

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        self._check("scan")
        return self.inner.scan()

    def list_keys(self) -> Iterator[BlockKey]:
        self._check("list")
        return self.inner.list_keys()

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        self._check("read_header")
        return self.inner.read_header(key)

    def quarantine(self, key: BlockKey, reason: str) -> None:
        self._check("quarantine")
        self.inner.quarantine(key, reason)

    def probe(self) -> None:
        self._check("probe")
        self.inner.probe()

    def free_bytes(self) -> int | None:
        self._check("statvfs")
        return self.inner.free_bytes()

    def default_manifest_url(self) -> str | None:
        return self.inner.default_manifest_url()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # path_of, describe_namespace, ...
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class FaultPlugin:
    @hookimpl
    def lifeboatcache_add_backends(self, register):  # type: ignore[no-untyped-def]
        register.backend(NAME, f"{__name__}:FaultyFileBackend")
