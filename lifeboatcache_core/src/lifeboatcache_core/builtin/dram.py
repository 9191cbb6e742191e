"""In-process DRAM tier: a dict of immutable payloads, bounded by the tier's capacity."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from lifeboatcache_core.abc import Backend, PluginConfig
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.keys import BlockKey


class DramConfig(PluginConfig):
    """The DRAM tier has no options of its own; its size is the tier's ``capacity_gb``."""


class DramBackend(Backend):
    persistent = False
    parallel_io = False  # a dict lookup and a memcpy, under the GIL
    config_model = DramConfig

    def __init__(self, config: PluginConfig | None = None, *, tier: str = "dram") -> None:
        super().__init__(config or DramConfig(), tier=tier)
        self._blocks: dict[BlockKey, tuple[BlockMeta, bytes]] = {}
        self._lock = threading.Lock()

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        data = b"".join(payload)
        with self._lock:
            self._blocks[key] = (meta, data)
        return len(data)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        meta, data = self._blocks[key]
        if dest is not None and dest.nbytes == len(data):
            dest[:] = data
            return meta, dest
        return meta, memoryview(data)

    def exists(self, key: BlockKey) -> bool:
        return key in self._blocks

    def delete(self, key: BlockKey) -> int:
        with self._lock:
            entry = self._blocks.pop(key, None)
        return len(entry[1]) if entry else 0

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        with self._lock:
            items = [(k, len(v[1])) for k, v in self._blocks.items()]
        yield from items
