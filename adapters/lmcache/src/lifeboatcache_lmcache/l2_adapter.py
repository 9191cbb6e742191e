"""``LifeboatL2Adapter``: lifeboatcache as an L2 adapter of LMCache's multiprocess server.

    lmcache server --l1-size-gb 20 --l2-adapter '{"type": "plugin",
        "module_path": "lifeboatcache_lmcache.l2_adapter", "class_name": "LifeboatL2Adapter",
        "adapter_params": {"lifeboat_config": "/etc/lifeboatcache.toml"}}'

LMCache's contract (``l2_adapters/base.py``) and how it is kept here:
- Store tasks are whole: a task succeeds only if every object was stored; objects that
  were stored stay readable either way, objects that failed are never visible (a tier
  publishes a key only after its block is renamed into place).
- ``lookup_and_lock`` answers from the tiers' index, one bit per key, reported once; found
  keys are counted as locked until ``submit_unlock`` (which always succeeds). The tiers have
  no pinning, so a block evicted between lookup and load reads as a failed load bit: LMCache
  then recomputes; it never receives other bytes.
- Loads write into the caller's L1 buffers (copy-free for identity codecs) and verify every
  block (length, xxh3); a damaged block is a miss.
- Each kind of task completes on one of three event fds, owned by this adapter.
- Usage: the base class's byte accounting, per cache salt, of the objects this process stored
  while a tier holds them. ``delete`` removes objects from every tier; a tier's own eviction
  is reported too (``on_l2_keys_deleted``, usage down) once no tier holds the object, so
  LMCache's view of L2 and its per-salt quotas follow what the tiers keep.

Keys: ``ObjectKey`` names the model, the rank layout (``kv_rank``), the object group and
the cache salt, not the weights nor the byte layout, so the namespace adds the weights
fingerprint and the objects' shapes and dtypes (from the layout descriptors LMCache passes
to lookups and from the objects on store and load).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.engine import EngineTexts, open_for_engine
from lifeboatcache_core.fingerprint import weights_fingerprint
from lifeboatcache_core.keys import BlockKey, Namespace
from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface, L2TaskId
from lmcache.v1.distributed.l2_adapters.config import L2AdapterConfigBase
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.platform import create_event_notifier

from lifeboatcache_lmcache.settings import L2AdapterParams, load_lifeboat_config, on_error_of

log = logging.getLogger("lifeboatcache.lmcache")
_TEXTS = EngineTexts(
    log=log,
    refuse="lifeboatcache: cannot start the LMCache L2 adapter: {exc}. Fix the configuration, or set "
           "engine.on_error = 'serve' to let LMCache run without this L2",
    serve="lifeboatcache: LMCache L2 adapter disabled, LMCache serves without it (engine.on_error = 'serve'): %s",
)

#: bumped when the byte meaning of a stored object changes
KV_FORMAT = "lmcache-mp-1"


def layout_tag(shapes: Sequence[Any], dtypes: Sequence[Any]) -> str:
    """One string for an object's byte layout, the same from a descriptor and from an object."""
    return ";".join(f"{str(d).removeprefix('torch.')}{list(s)}" for s, d in zip(shapes, dtypes, strict=True))


def object_layout_tag(obj: MemoryObj) -> str:
    """``layout_tag`` of an L1 object (single-tensor objects carry no ``shapes`` list)."""
    meta = obj.metadata
    if meta.shapes is not None and meta.dtypes is not None:
        return layout_tag(meta.shapes, meta.dtypes)
    return layout_tag([meta.shape], [meta.dtype])


def host_view(obj: MemoryObj) -> memoryview:
    """A writable flat byte view of an L1 object (no copy)."""
    if obj.get_size() == 0:
        return memoryview(bytearray())
    data = obj.byte_array
    if isinstance(data, memoryview) and not data.readonly:
        return data.cast("B") if data.format != "B" or data.ndim != 1 else data
    tensor = obj.tensor
    if tensor is None:
        raise ValueError(f"L1 object {type(obj).__name__} exposes no writable memory")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


class LifeboatL2AdapterConfig(L2AdapterConfigBase):
    """Found by LMCache's plugin loader by name (``<ClassName>Config``); keeps the raw params so
    that a bad key is judged by the adapter under ``engine.on_error`` (serve or fail)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = dict(params)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LifeboatL2AdapterConfig:
        return cls(d)

    @classmethod
    def help(cls) -> str:
        fields = ", ".join(f"{name} ({field.description or ''})".replace(" ()", "")
                           for name, field in L2AdapterParams.model_fields.items())
        return f"lifeboatcache L2 adapter params: {fields}"


class LifeboatL2Adapter(L2AdapterInterface):
    """An LMCache L2 adapter over one TieredCache."""

    def __init__(self, config: LifeboatL2AdapterConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(max_capacity_bytes=0)  # the tiers evict by their own capacity and policy
        raw = config.params if isinstance(config, LifeboatL2AdapterConfig) else dict(config or {})
        self._store_efd = create_event_notifier()
        self._lookup_efd = create_event_notifier()
        self._load_efd = create_event_notifier()
        self._lock = threading.Lock()
        self._next_id = 0
        self._stores: dict[L2TaskId, L2StoreResult] = {}
        self._lookups: dict[L2TaskId, Bitmap] = {}
        self._loads: dict[L2TaskId, Bitmap] = {}
        self._locks: Counter[ObjectKey] = Counter()
        self._namespaces: dict[tuple[str, int, int, str, str], str] = {}
        self._layouts_seen: dict[tuple[str, int, int, str], set[str]] = {}
        #: the objects counted in the base class's usage, by block: their keys and sizes
        self._counted: dict[BlockKey, tuple[ObjectKey, int]] = {}
        self._removed: list[BlockKey] = []  # counted blocks a tier removed, for the waiters to settle
        self._settling = False
        # held while counting and telling LMCache, so its listeners hear a key stored before deleted
        self._accounting = threading.Lock()
        self.cache: TieredCache | None = None
        self.disabled_reason = ""
        self.params = L2AdapterParams()

        def prepare() -> LifeboatConfig:
            self.params = L2AdapterParams.parse(raw)
            self._fingerprint = weights_fingerprint(self.params.model_path or "")
            return load_lifeboat_config(self.params.lifeboat_config)

        self.cache = open_for_engine(prepare, on_error=lambda: on_error_of(raw), texts=_TEXTS,
                                     disabled=self._disabled)
        self._waiters = ThreadPoolExecutor(self.params.io_waiters, thread_name_prefix="lifeboat-l2-wait")

    # ------------------------------------------------------------------ keys

    def _namespace(self, key: ObjectKey, layout: str) -> str:
        ident = (key.model_name, key.kv_rank, key.object_group_id, key.cache_salt, layout)
        ns_id = self._namespaces.get(ident)
        if ns_id is None:
            assert self.cache is not None
            ns = Namespace(
                engine="lmcache", model=key.model_name, weights_fingerprint=self._fingerprint,
                kv_format=KV_FORMAT, layout=layout, rank=key.kv_rank, world_size=0, platform="host",
                extra={"object_group": key.object_group_id},
            ).for_tenant(key.cache_salt)  # the salt's digest, never the salt, is stored beside the blocks
            ns_id = self.cache.register_namespace(ns)
            self.cache.listen_removed(ns_id, self._on_removed)
            with self._lock:
                self._namespaces[ident] = ns_id
                self._layouts_seen.setdefault(ident[:4], set()).add(layout)
        return ns_id

    def _block_keys(self, keys: Sequence[ObjectKey], layouts: Sequence[str]) -> list[BlockKey]:
        return [BlockKey(self._namespace(k, layout), bytes(k.chunk_hash)) for k, layout in zip(keys, layouts,
                                                                                             strict=True)]

    def _lookup_candidates(self, key: ObjectKey, layout: str | None) -> list[BlockKey]:
        """The keys a lookup may find: the descriptor's layout, or (no usable descriptor) every layout
        this adapter has stored or loaded for that model/rank/group/salt. A load always uses the
        destination object's own layout, so a wrong guess here costs a failed load bit, never bytes."""
        if layout:
            return [BlockKey(self._namespace(key, layout), bytes(key.chunk_hash))]
        with self._lock:
            seen = sorted(self._layouts_seen.get((key.model_name, key.kv_rank, key.object_group_id,
                                                  key.cache_salt), ()))
        return [BlockKey(self._namespace(key, tag), bytes(key.chunk_hash)) for tag in seen]

    @staticmethod
    def _object_layouts(objects: Sequence[MemoryObj]) -> list[str]:
        return [object_layout_tag(o) for o in objects]

    # ------------------------------------------------------------------ tasks

    def _new_task(self) -> L2TaskId:
        with self._lock:
            self._next_id += 1
            return self._next_id

    def _finish(self, results: dict[L2TaskId, Any], task_id: L2TaskId, value: Any, notify: Callable[[], None]) -> None:
        with self._lock:
            results[task_id] = value
        notify()

    def _in_background(self, fn: Callable[[], None], on_error: Callable[[BaseException], None]) -> None:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # a bug must not leave LMCache waiting forever
                log.exception("lifeboatcache: L2 task failed")
                on_error(exc)
        try:
            self._waiters.submit(run)
        except RuntimeError as exc:  # closing
            on_error(exc)

    # ------------------------------------------------------------------ store

    def submit_store_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> L2TaskId:
        task_id = self._new_task()
        fail = lambda _exc: self._finish(self._stores, task_id, L2StoreResult(False, 0),  # noqa: E731
                                         self._store_efd.notify)
        if self.cache is None or len(keys) != len(objects):
            fail(None)
            return task_id
        self._in_background(lambda: self._store(task_id, keys, objects), fail)
        return task_id

    def _store(self, task_id: L2TaskId, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        assert self.cache is not None
        block_keys = self._block_keys(keys, self._object_layouts(objects))
        present = self.cache.exists(block_keys)
        new = [i for i, p in enumerate(present) if not p]
        stored = self.cache.put([block_keys[i] for i in new], [host_view(objects[i]) for i in new])
        ok_new = [i for i, ok in zip(new, stored, strict=True) if ok]
        success = all(stored)
        written = sum(objects[i].get_size() for i in ok_new)
        if ok_new:
            self._count([block_keys[i] for i in ok_new], [keys[i] for i in ok_new],
                        [objects[i].get_size() for i in ok_new])
        if not success:
            already = len(keys) - len(new)
            log.warning("lifeboatcache: L2 store task %d: %d of %d objects not stored", task_id,
                        len(keys) - already - len(ok_new), len(keys))
        self._finish(self._stores, task_id, L2StoreResult(success, written), self._store_efd.notify)

    def _count(self, blocks: list[BlockKey], keys: list[ObjectKey], sizes: list[int]) -> None:
        """Count stored objects in the usage and tell LMCache's listeners; an object stored again
        before its removal was settled stays counted (and told) once. One a tier removed again
        already (a tight tier, or an eviction the listener skipped as not yet counted) is then
        handed to the settling like any removal (an unknown answer, a tier still indexing, is not)."""
        assert self.cache is not None
        with self._accounting:
            with self._lock:
                fresh = [j for j, block in enumerate(blocks) if block not in self._counted]
                for j in fresh:
                    self._counted[blocks[j]] = (keys[j], sizes[j])
            if fresh:
                self._notify_keys_stored([keys[j] for j in fresh], [sizes[j] for j in fresh])
        gone = [b for b, here in zip(blocks, self.cache.presence(blocks), strict=True) if here is False]
        if gone:
            self._on_removed(gone)

    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        with self._lock:
            done, self._stores = self._stores, {}
        return done

    # ------------------------------------------------------------------ lookup and lock

    def submit_lookup_and_lock_task(self, keys: list[ObjectKey],
                                    group_layout_descs: dict[int, MemoryLayoutDesc]) -> L2TaskId:
        """Index lookups only (no I/O), answered at once; found keys are locked."""
        task_id = self._new_task()
        bitmap = Bitmap(len(keys))
        if self.cache is not None and keys:
            tags = {gid: layout_tag(d.shapes, d.dtypes) for gid, d in (group_layout_descs or {}).items()}
            candidates = [self._lookup_candidates(k, tags.get(k.object_group_id)) for k in keys]
            flat = [c for cands in candidates for c in cands]
            found = iter(self.cache.exists(flat))
            hits = [i for i, cands in enumerate(candidates) if sum(next(found) for _ in cands) > 0]
            with self._lock:
                for i in hits:
                    bitmap.set(i)
                    self._locks[keys[i]] += 1
        self._finish(self._lookups, task_id, bitmap, self._lookup_efd.notify)
        return task_id

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        with self._lock:
            return self._lookups.pop(task_id, None)

    def submit_unlock(self, keys: list[ObjectKey]) -> None:
        """Always succeeds (LMCache never retries); unknown keys are ignored."""
        with self._lock:
            for key in keys:
                count = self._locks.get(key, 0)
                if count <= 1:
                    self._locks.pop(key, None)
                else:
                    self._locks[key] = count - 1

    def locked_keys(self) -> int:
        with self._lock:
            return len(self._locks)

    # ------------------------------------------------------------------ load

    def submit_load_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> L2TaskId:
        task_id = self._new_task()
        fail = lambda _exc: self._finish(self._loads, task_id, Bitmap(len(keys)),  # noqa: E731
                                         self._load_efd.notify)
        if self.cache is None or len(keys) != len(objects):
            fail(None)
            return task_id
        self._in_background(lambda: self._load(task_id, keys, objects), fail)
        return task_id

    def _load(self, task_id: L2TaskId, keys: list[ObjectKey], objects: list[MemoryObj]) -> None:
        assert self.cache is not None
        got = self.cache.get(self._block_keys(keys, self._object_layouts(objects)), [host_view(o) for o in objects])
        bitmap = Bitmap(len(keys))
        hits = [i for i, ok in enumerate(got) if ok]
        for i in hits:
            bitmap.set(i)
        if hits:
            self._notify_keys_accessed([keys[i] for i in hits])
        self._finish(self._loads, task_id, bitmap, self._load_efd.notify)

    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None:
        with self._lock:
            return self._loads.pop(task_id, None)

    # ------------------------------------------------------------------ delete and removals

    def delete(self, keys: list[ObjectKey]) -> None:
        """Remove objects from every tier now (LMCache's eviction: per-salt quotas, or a global policy).

        Synchronous, like LMCache's own adapters. ``on_l2_keys_deleted`` hears each key a tier
        held, once, and the usage drops by what this process had counted for it (an object kept
        from an earlier run is removed and told with size 0). A key is found under the layouts
        this adapter has seen for its model, rank, group and salt (LMCache looks a key up, with
        its layout, before it can evict it).
        """
        if self.cache is None or not keys:
            return
        candidates = [self._lookup_candidates(k, None) for k in keys]
        blocks = [b for cands in candidates for b in cands]
        if not blocks:
            return
        held = self.cache.presence(blocks)
        with self._accounting:
            with self._lock:  # uncounted first, so the removal listener leaves these to us
                counted = [self._counted.pop(b, None) for b in blocks]
            self.cache.discard(blocks)
            gone: dict[ObjectKey, int] = {}
            found = iter(zip(held, counted, strict=True))
            for key, cands in zip(keys, candidates, strict=True):
                for _ in cands:
                    here, entry = next(found)
                    if entry is not None:
                        gone[key] = gone.get(key, 0) + entry[1]
                    elif here is True:
                        gone.setdefault(key, 0)
            if gone:
                self._notify_keys_deleted(list(gone), list(gone.values()))

    def _on_removed(self, blocks: list[BlockKey]) -> None:
        """The cache's removal listener (a tier's I/O thread): note the counted blocks, and have a
        waiter thread settle them (LMCache's listeners are not run on our I/O threads)."""
        with self._lock:
            self._removed.extend(b for b in blocks if b in self._counted)
            if not self._removed or self._settling:
                return
            self._settling = True
        try:
            self._waiters.submit(self._settle_removed)
        except RuntimeError:  # closing: nobody is listening any more
            with self._lock:
                self._settling = False

    def _settle_removed(self) -> None:
        """Blocks a tier removed that no tier holds now (one evicted from DRAM may still be on disk):
        uncounted, and told to LMCache as deleted."""
        try:
            with self._lock:
                removed, self._removed = list(dict.fromkeys(self._removed)), []
            cache = self.cache
            with self._accounting:
                held = cache.presence(removed) if cache is not None else [False] * len(removed)
                with self._lock:
                    gone = [entry for block, here in zip(removed, held, strict=True) if here is not True
                            for entry in [self._counted.pop(block, None)] if entry is not None]
                if gone:
                    self._notify_keys_deleted([key for key, _size in gone], [size for _key, size in gone])
        except Exception:  # on a waiter thread, whose future nobody reads: say it here
            log.exception("lifeboatcache: settling the tiers' removals for LMCache failed")
        finally:
            with self._lock:
                self._settling = False
                again = bool(self._removed)
            if again:
                self._on_removed([])

    def counted_objects(self) -> int:
        """Objects in the usage (stored by this process, held by a tier)."""
        with self._lock:
            return len(self._counted)

    # ------------------------------------------------------------------ fds, status, lifecycle

    def get_store_event_fd(self) -> int:
        return self._store_efd.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._lookup_efd.fileno()

    def get_load_event_fd(self) -> int:
        return self._load_efd.fileno()

    def report_status(self) -> dict[str, Any]:
        if self.cache is None:
            return {"is_healthy": False, "type": "lifeboatcache", "reason": self.disabled_reason}
        health = self.cache.health()
        return {"is_healthy": any(t["up"] for t in health), "type": "lifeboatcache", "tiers": health,
                "stats": self.cache.stats(), "locked_keys": self.locked_keys()}

    def _disabled(self, exc: Exception, on_error: str) -> None:
        """The cache cannot start: keep the reason for ``report_status``; a refusal closes our fds."""
        self.disabled_reason = str(exc)
        if on_error == "fail":
            self._close_fds()

    def _close_fds(self) -> None:
        for efd in (self._store_efd, self._lookup_efd, self._load_efd):
            efd.close()

    def close(self) -> None:
        if self.cache is not None:
            for ns_id in list(self._namespaces.values()):
                self.cache.listen_removed(ns_id, None)
        self._waiters.shutdown(wait=True)
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        self._close_fds()
