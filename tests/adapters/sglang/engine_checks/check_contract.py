"""The core BackendContract, run through LifeboatHiCacheStorage's engine-facing calls.

``HiCacheBackendView`` is a test-only Backend whose every operation goes through what SGLang
calls (``set``/``get``/``batch_exists``, one backend per namespace via SGLang's dynamic
factory): a block is a data page plus a length page written after it, so variable sizes
fit SGLang's fixed-page API. Contract tests of operations SGLang's API does not have
(delete, scan, quarantine, probe) are marked not applicable below.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lifeboatcache_core.abc import Backend, PluginConfig
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.testing.contracts import BackendContract

from tests.adapters.sglang.engine_checks import sglang_import_shim
from tests.adapters.sglang.engine_checks.conftest import write_config

sglang_import_shim.install()

from lifeboatcache_sglang.settings import dynamic_extra_config  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402


class HiCacheBackendView(Backend):
    persistent = True

    def __init__(self, config_file: Path) -> None:
        super().__init__(PluginConfig(), tier="sglang-view")
        self.extra = dynamic_extra_config(lifeboat_config=str(config_file), interface_v1=False)
        self.storages: dict[str, Any] = {}
        self.lock = threading.Lock()

    def storage(self, namespace: str) -> Any:
        with self.lock:
            if namespace not in self.storages:
                config = HiCacheStorageConfig(
                    tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                    is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                    model_name=namespace, extra_config=self.extra)
                self.storages[namespace] = StorageBackendFactory.create_backend("dynamic", config, None)
            return self.storages[namespace]

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        data = b"".join(bytes(memoryview(p)) for p in payload)
        storage, page = self.storage(key.namespace), key.digest.hex()
        body = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        if not (storage.set(page, body) and storage.set(page + ".len", torch.tensor([len(data)]))):
            raise OSError(f"SGLang storage did not store {page[:16]}")
        return len(data)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        storage, page = self.storage(key.namespace), key.digest.hex()
        length = storage.get(page + ".len", torch.zeros(1, dtype=torch.int64))
        if length is None:
            raise KeyError(key)
        n = int(length[0])
        out = dest if dest is not None and dest.nbytes == n else memoryview(bytearray(n))
        target = torch.frombuffer(out, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        if storage.get(page, target) is None:
            raise KeyError(key)
        return BlockMeta.new(key, n), out

    def exists(self, key: BlockKey) -> bool:
        page = key.digest.hex()
        return self.storage(key.namespace).batch_exists([page + ".len", page]) == 2

    def delete(self, key: BlockKey) -> int:
        raise NotImplementedError("SGLang's storage API has no delete")

    def scan(self) -> Any:
        raise NotImplementedError("SGLang's storage API has no listing")

    def close(self) -> None:
        for storage in self.storages.values():
            storage.close()


class TestHiCacheStorageContract(BackendContract):
    def make_backend(self, tmp_path: Path) -> Backend:
        return HiCacheBackendView(write_config(tmp_path) if not (tmp_path / "lifeboat.toml").exists()
                                  else tmp_path / "lifeboat.toml")

    # Not applicable: operations SGLang's HiCacheStorage API does not have.
    test_exists_and_delete = None
    test_bulk_delete_reports_every_key_in_order = None
    test_scan_lists_every_block = None
    test_quarantine_removes_the_block = None
    test_probe_passes = None
