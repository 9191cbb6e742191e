"""The core BackendContract, run through LifeboatL2Adapter's LMCache-facing task API.

``L2BackendView`` is a test-only Backend whose every operation is an LMCache L2 task (store,
lookup-and-lock + unlock, load) on real L1 memory objects: a block is a data object plus a
length object stored after it, so variable sizes fit LMCache's object API. Contract tests
of operations LMCache does not call on this adapter (delete, scan, quarantine, probe) are
marked not applicable below.
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
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

from tests.adapters.lmcache.engine_checks.check_l2_adapter import create, load, lookup, store
from tests.adapters.lmcache.engine_checks.conftest import write_config


def memory_obj(data: torch.Tensor) -> TensorMemoryObj:
    raw = data.reshape(-1).view(torch.uint8)
    meta = MemoryObjMetadata(shape=data.shape, dtype=data.dtype, address=0, phy_size=raw.numel(), ref_count=1,
                             fmt=MemoryFormat.BINARY, shapes=[data.shape], dtypes=[data.dtype])
    return TensorMemoryObj(raw, meta, None)


LENGTH_DESC = {0: MemoryLayoutDesc(shapes=[torch.Size([1])], dtypes=[torch.int64])}


class L2BackendView(Backend):
    persistent = True

    def __init__(self, config_file: Path) -> None:
        super().__init__(PluginConfig(), tier="lmcache-view")
        self.adapter = create(config_file)
        # LMCache calls an adapter from one store thread and one prefetch thread
        self.store_lock = threading.Lock()
        self.lock = threading.Lock()

    @staticmethod
    def _keys(key: BlockKey) -> tuple[ObjectKey, ObjectKey]:
        data = ObjectKey(chunk_hash=key.digest, model_name=key.namespace, kv_rank=0)
        return data, ObjectKey(chunk_hash=key.digest + b".len", model_name=key.namespace, kv_rank=0)

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        blob = b"".join(bytes(memoryview(p)) for p in payload)
        data_key, len_key = self._keys(key)
        body = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
        with self.store_lock:
            for k, obj in ((data_key, memory_obj(body)), (len_key, memory_obj(torch.tensor([len(blob)])))):
                if not store(self.adapter, [k], [obj]).is_successful():
                    raise OSError(f"LMCache L2 store of {k} failed")
        return len(blob)

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        data_key, len_key = self._keys(key)
        with self.lock:
            if lookup(self.adapter, [len_key], LENGTH_DESC) != [0]:
                raise KeyError(key)
            try:
                length = torch.zeros(1, dtype=torch.int64)
                if load(self.adapter, [len_key], [memory_obj(length)]) != [0]:
                    raise KeyError(key)
                n = int(length[0])
                out = dest if dest is not None and dest.nbytes == n else memoryview(bytearray(n))
                target = torch.frombuffer(out, dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
                if load(self.adapter, [data_key], [memory_obj(target)]) != [0]:
                    raise KeyError(key)
            finally:
                self.adapter.submit_unlock([len_key])
        return BlockMeta.new(key, n), out

    def exists(self, key: BlockKey) -> bool:
        _, len_key = self._keys(key)
        with self.lock:
            found = lookup(self.adapter, [len_key], LENGTH_DESC) == [0]
            self.adapter.submit_unlock([len_key])
        return found

    def delete(self, key: BlockKey) -> int:
        raise NotImplementedError("LMCache deletes only through adapters that declare a capacity")

    def scan(self) -> Any:
        raise NotImplementedError("not part of this adapter's LMCache API")

    def close(self) -> None:
        assert self.adapter.locked_keys() == 0, "every lookup lock must have been released"
        self.adapter.close()


class TestL2AdapterContract(BackendContract):
    def make_backend(self, tmp_path: Path) -> Backend:
        config = tmp_path / "lifeboat.toml"
        return L2BackendView(config if config.exists() else write_config(tmp_path))

    # Not applicable: operations LMCache does not call on this adapter.
    test_exists_and_delete = None
    test_bulk_delete_reports_every_key_in_order = None
    test_scan_lists_every_block = None
    test_quarantine_removes_the_block = None
    test_probe_passes = None
