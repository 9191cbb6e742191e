"""One tier: a backend, its codec and eviction policy, an in-memory index and its health.

The index (key -> stored bytes) is the hot path: lookups never touch storage, capacity is
enforced against it on every put (victims are chosen and removed *before* the new block is
written), and it is rebuilt from the backend on open while the tier already serves.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lifeboatcache_core.abc import (
    BLOCK_ERRORS,
    Backend,
    BlockHint,
    Codec,
    EvictionPolicy,
    KVLayout,
    ManifestStore,
    StreamDecoder,
    StreamEncoder,
    outcome_of,
)
from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.config import manifest_scheme
from lifeboatcache_core.errors import CorruptBlockError, LifeboatError, ManifestError, TierFullError
from lifeboatcache_core.integrity import BlockSigner, TamperedBlockError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.prefixes import PrefixGuard
from lifeboatcache_core.recovery import RecoveryProgress, recover
from lifeboatcache_core.scratch import ThreadScratch
from lifeboatcache_core.stats import OPS, LatencyHistogram, StoreOutcome, TierSample, TierStats, frozen
from lifeboatcache_core.threads import name_os_thread, start_background_thread

if TYPE_CHECKING:
    from lifeboatcache_core.config import TierConfig
    from lifeboatcache_core.registry import PluginRegistry

#: the tag of the identity codec: blocks stored raw below ``codec_from_fill``
RAW_CODEC = "none@1"
log = logging.getLogger("lifeboatcache")

#: bytes a stored block may take beyond its payload (header + meta + trailer, O_DIRECT padded)
BLOCK_OVERHEAD = 4096 + 64
MAX_BACKOFF_S = 60.0
#: how long a put waits for in-flight writes to land when only they stand between it and space
RESERVE_WAIT_S = 5.0
#: a store whose ``evictable`` vetoes the policy's victim looks this far down the policy's order
#: for one it accepts (``Tier._next_evictable``): a bound on the work under the tier's lock, not a
#: tuned number
VICTIM_LOOKAHEAD = 256
#: batches of uses from above (one per ``Tier.touch``: a get served above, an engine's report)
#: that a tier keeps until its policy next chooses a victim; past it the oldest are dropped: a
#: bound on memory for a tier that chooses no victim for a long while
USES_PENDING_MAX = 4096


class IncompatibleBlockError(CorruptBlockError):
    """A valid block this process cannot decode (other codec version, other size).

    A CorruptBlockError so that a backend's bulk read reports it for its key alone (a sink's
    refusals are CorruptBlockErrors); the tier tells the two apart: an incompatible block is a
    miss but is neither quarantined nor forgotten.
    """


def describe_layout(layout: KVLayout | None) -> str:
    """``bfloat16 (layer, block, page) = (30, 8, 12288)`` for metrics and the dashboard ("" for none)."""
    if layout is None:
        return ""
    return f"{layout.dtype} ({', '.join(layout.axes)}) = {tuple(layout.shape)}"


def layout_from_meta(meta: BlockMeta) -> KVLayout | None:
    if meta.dtype is None or meta.shape is None or meta.axes is None:
        return None
    return KVLayout(meta.dtype, tuple(meta.shape), tuple(meta.axes))


class Tier:
    """A configured tier. All methods are thread-safe; I/O happens outside ``lock``."""

    def __init__(self, cfg: TierConfig, registry: PluginRegistry, *, seed: int = 0,
                 removal_listeners: dict[str, Callable[[list[BlockKey]], None]] | None = None,
                 on_removed: Callable[[Tier, list[BlockKey]], None] | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.label
        self.backend_name = cfg.backend
        self.capacity = cfg.capacity_bytes
        self.write_mode = cfg.write
        self.registry = registry
        self._backend_cls: type[Backend] = registry.load("backend", cfg.backend)
        self.persistent = self._backend_cls.persistent
        self._parallel_io = self._backend_cls.parallel_io
        self.codec: Codec = registry.load("codec", cfg.codec)(cfg.codec_config)
        #: the layout of the last block this tier encoded: what a dtype-aware codec saw (metrics)
        self.codec_layout: KVLayout | None = None
        #: each thread's buffer that codecs encode into (``Codec.encode_into``): a store hands the
        #: payload to the backend before its thread encodes again, so one buffer per thread serves
        self._encode_out = ThreadScratch()
        self.policy: EvictionPolicy = registry.load("policy", cfg.policy)(cfg.policy_config, seed=seed)
        #: the time of the use ``_apply_uses`` is handing the policy, else None (now)
        self._use_at: float | None = None
        if self.policy.clock is not None:  # it reasons about time: each use at its own, not when applied
            self.policy.clock = self._policy_now
        self.backend: Backend | None = None
        # Reads and writes have pools of their own: an engine waits for a load (its request
        # cannot start), never for a store, so a load must not queue behind a burst of stores
        # (one 7k-token prompt is ~30 stores of 6 MB). Each pool has ``io_threads`` threads.
        self.read_pool = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix=f"lifeboat-{self.name}-read",
                                            initializer=name_os_thread, initargs=("lifeboat-read",))
        # Stores wait for nobody: their threads yield to the engine's on a busy host (write_nice).
        self.write_pool = ThreadPoolExecutor(cfg.io_threads, thread_name_prefix=f"lifeboat-{self.name}-write",
                                             initializer=start_background_thread,
                                             initargs=("lifeboat-write", cfg.write_nice))
        self.io_threads = cfg.io_threads
        self.lock = threading.Lock()
        self._space = threading.Condition(self.lock)  # signalled when a reservation is released
        self.index: dict[BlockKey, int] = {}
        #: namespace id -> called with the keys of a batch this tier no longer holds (evicted, discarded,
        #: set aside), off the engine's thread; ``TieredCache`` shares one dict with all its tiers
        self.removal_listeners: dict[str, Callable[[list[BlockKey]], None]] = (
            {} if removal_listeners is None else removal_listeners)
        #: called with this tier and every batch of keys it no longer holds, whatever their
        #: namespace (``TieredCache``: the stager, whose plans must look again at blocks they
        #: counted as staged), off the engine's thread like ``removal_listeners``
        self.on_removed = on_removed
        # keep_prefixes: prefix depth of blocks stored with one, their last uses, return gaps
        self._prefixes = PrefixGuard(cfg.keep_prefixes_idle_s)
        #: (when, keys) used above this tier since the policy last chose a victim (``touch``)
        self._uses_pending: deque[tuple[float, Sequence[BlockKey], bool]] = deque(maxlen=USES_PENDING_MAX)
        self.used = 0
        self.reserved = 0
        self.stats = TierStats()
        self.latency = {op: LatencyHistogram() for op in OPS}
        self.up = False
        self.reason = "not opened"
        self.index_complete = False
        self.index_loading = False
        self.consecutive_errors = 0
        self.next_probe = 0.0
        self.next_check = time.monotonic() + cfg.probe_seconds
        self.backoff = cfg.reprobe_seconds
        self.lower: Tier | None = None  # next tier down, for write-back demotion
        self._codecs: dict[str, Codec] = {self.codec.tag: self.codec}
        #: codec tag -> (payload bytes, raw bytes) of the blocks it stored here: the size a
        #: store reserves before it encodes (``_expected_payload``)
        self._encoded: dict[str, tuple[int, int]] = {}
        self._identity = self.codec.identity
        #: blocks held raw below ``codec_from_fill`` by a coding tier, oldest first: what compaction
        #: re-encodes once the fill is reached (``_compact``)
        self._raw: dict[BlockKey, None] = {}
        self._compacting = False  # a compaction pass is queued or running (one at a time)
        self._compaction: Future[None] | None = None  # the pass queued last
        self._compact_key: BlockKey | None = None  # the block it is re-encoding now
        self._compact_lost = False  # that block was forgotten (evicted, discarded) meanwhile
        self._closing = False  # close() has begun: a compaction pass stops at its next block
        self.manifest: ManifestStore | None = None
        self.recovery = RecoveryProgress()
        self.signer: BlockSigner | None = cfg.integrity_signer()
        self._full_logged = False  # the "tier is full" line is logged once

    # ------------------------------------------------------------------ health

    def open(self) -> bool:
        """Create the backend if needed and run its write probe; return whether the tier is up.

        The manifest store is opened (or, when open, asked) after the probe: a shared one must
        answer, or this node may not write, so its failure is the tier's reason to be down.
        """
        try:
            if self.backend is None:
                self.backend = self._backend_cls(self.cfg.backend_options, tier=self.name)
            self._probe()
            if self.manifest is None:
                self._open_manifest()
            else:
                self.manifest.ping()
        except Exception as exc:  # any failure to open is a reason, never a crash
            self.mark_down(_reason(exc))
            return False
        with self.lock:
            was_up, self.up, self.reason = self.up, True, ""
            self.consecutive_errors = 0
            self.backoff = self.cfg.reprobe_seconds
        if not was_up:
            log.info("tier %s (%s) is up", self.name, self.backend_name)
        return True

    def check(self) -> None:
        """Periodic write probe of an up tier (DESIGN §6): a failure marks it down with the reason."""
        self.next_check = time.monotonic() + self.cfg.probe_seconds
        if self.backend is None or not self.up:
            return
        try:
            self._probe()
            if self.manifest is not None:
                self.manifest.ping()
        except Exception as exc:
            self.mark_down(_reason(exc))

    def _probe(self) -> None:
        """The backend's probe, where a full store is fine as long as this tier holds blocks.

        A bounded tier is full in its steady state (eviction keeps it there); going down then
        would turn every block it holds into a miss. Only an empty tier on a full store is down:
        it has nothing to serve and nothing fits (an engine's fallback tier takes over).
        """
        assert self.backend is not None
        try:
            self.backend.probe()
        except TierFullError as exc:
            if not (self.index or next(iter(self.backend.list_keys()), None) is not None):
                raise
            if not self._full_logged:
                self._full_logged = True
                log.info("tier %s is full (%s): it serves what it holds and stores what eviction makes room for",
                         self.name, exc)

    def mark_down(self, reason: str) -> None:
        with self.lock:
            was_up, changed = self.up, reason != self.reason
            self.up, self.reason = False, reason
            self.next_probe = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, MAX_BACKOFF_S)
        if was_up or changed:
            log.warning("tier %s (%s) skipped: %s", self.name, self.backend_name, reason)

    def _io_error(self, exc: BaseException) -> None:
        with self.lock:
            self.stats.errors += 1
            self.consecutive_errors += 1
            failing = self.consecutive_errors >= self.cfg.unhealthy_after
        if failing and self.up:
            self.mark_down(f"{self.consecutive_errors} consecutive errors, last: {_reason(exc)}")

    def _io_ok(self) -> None:
        if self.consecutive_errors:
            with self.lock:
                self.consecutive_errors = 0

    # ------------------------------------------------------------------ index

    def load_index(self) -> None:
        """Rebuild the index (manifest, then the files); the tier serves by direct reads meanwhile."""
        assert self.backend is not None
        progress = self.recovery
        try:
            self.manifest = recover(self, self.backend, self.manifest, progress, self.name)
        except Exception as exc:
            self.recovery.phase = "failed"
            log.warning("tier %s: index recovery failed: %s", self.name, _reason(exc))
            self._io_error(exc)
            return
        finally:
            self.index_loading = False
        self.mark_index_complete()
        log.info("tier %s: index complete, %d blocks, %d bytes in %.2fs (%d from the manifest, %d from files, "
                 "%d rows without a file)", self.name, len(self.index), self.used, progress.seconds,
                 progress.manifest_rows, progress.added_from_files, progress.missing_files)

    def mark_index_complete(self) -> None:
        """From now on an index miss is a miss (no direct backend read); enforce the capacity."""
        if not self.index_complete:
            self.index_complete = True
            self._evict_over_capacity()

    def indexed(self) -> Container[BlockKey]:
        """Live membership of the index, without a copy or the lock (recovery's listing asks per key)."""
        return self.index.keys()

    def indexed_except(self, keys: set[BlockKey]) -> list[BlockKey]:
        """The indexed keys not in ``keys``, at one moment (under the lock)."""
        with self.lock:
            return [k for k in self.index if k not in keys]

    def add_to_index(self, items: list[tuple[BlockKey, int]]) -> None:
        """Index blocks known to be stored (recovery, a shared store's rows); indexed keys are kept as they are."""
        with self.lock:
            index, policy = self.index, self.policy
            for key, size in items:
                if key not in index:
                    index[key] = size
                    self.used += size
                    policy.insert(key, size, None)

    def drop_from_index(self, keys: list[BlockKey]) -> None:
        """Forget blocks that are no longer stored (their manifest rows go too)."""
        with self.lock:
            for key in keys:
                self._forget(key)
        if keys:
            self._tell_removed(keys)

    def set_aside(self, key: BlockKey, reason: str) -> None:
        """A damaged block: quarantine it and count it; it will be a miss."""
        self._corrupt(key, reason)

    # ------------------------------------------------------------------ manifest

    def _open_manifest(self) -> None:
        """Open the manifest store the URL's scheme selects (``sqlite:`` beside the blocks by default).

        A local store only speeds up restarts: when it cannot be opened the tier runs without
        one (restarts rescan). A shared store holds the fleet's rows: its failure raises.
        """
        assert self.backend is not None
        url = self.cfg.manifest_url or self.backend.default_manifest_url()
        if not self.cfg.manifest or url is None:
            return
        store: type[ManifestStore] = self.registry.load("manifest", manifest_scheme(url))
        try:
            self.manifest = store.open(url, self.name)
        except ManifestError as exc:
            if store.shared:
                raise
            log.warning("tier %s: %s; running without a manifest (restarts rescan)", self.name, exc)

    def _shared_rows(self) -> bool:
        """Whether a shared manifest store (a fleet's) holds this tier's rows and capacity."""
        manifest = self.manifest
        return manifest is not None and manifest.shared

    def _local_capacity(self) -> int:
        """What this node's index may hold: the capacity, unless a shared store enforces it fleet-wide.

        The index of a fleet tier also holds blocks other nodes stored (adopted on lookup), so
        counting them against this node's budget would evict the fleet's blocks twice.
        """
        return sys.maxsize if self._shared_rows() else self.capacity

    def _lookup(self, key: BlockKey) -> bool:
        """Ask the shared store about a key the index does not hold; index it when it has a row.

        Storage I/O (a query): only on the tier's pools or a blocking ``has``, never from
        ``presence``/``may_have`` on an engine's thread.
        """
        assert self.manifest is not None
        try:
            stored = self.manifest.lookup(key)
        except ManifestError as exc:
            self._io_error(exc)
            return False
        if stored is None:
            return False
        self.add_to_index([(key, stored)])
        return True

    def _publish(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None) -> list[BlockKey]:
        """Record a stored block in the manifest store, before the index learns it.

        Outside the tier lock (a shared store's row is a network round trip) and before
        indexing, so an eviction's ``record_delete`` always comes after the row it removes.
        When a shared store cannot take the row the block is not published: it is deleted
        again (storage and rows stay in step) and ``ManifestError`` propagates. Returns the
        blocks the store evicted to make room; their rows are already gone.
        """
        manifest, backend = self.manifest, self.backend
        if manifest is None:
            return []
        try:
            return manifest.commit_put(key, size, stored, codec, tag, capacity=self.capacity)
        except ManifestError:
            if backend is not None:
                try:
                    backend.delete(key)
                except OSError:
                    pass
            raise

    def _evict_over_capacity(self) -> None:
        victims: list[tuple[BlockKey, int]] = []
        with self.lock:
            self._apply_uses()
            while self.used > self._local_capacity():
                victim = self.policy.victim(None)
                if victim is None:
                    break
                victims.append((victim, self._forget(victim)))
                self.stats.evictions += 1
        self._drop(victims)

    def presence(self, key: BlockKey) -> bool | None:
        """What the in-memory index alone says about ``key``: no I/O, no lock.

        True: indexed. False: this tier cannot hold it (down, or a complete index of a tier
        nobody else writes to). None: only storage could tell (the index is still loading, or
        the tier is shared and another node may have written it). Safe on an engine's
        scheduler thread, which must never wait for storage.
        """
        if not self.up:
            return False
        if key in self.index:
            return True
        if self.index_complete and not self.cfg.shared and not self._shared_rows():
            return False
        return None

    def may_have(self, key: BlockKey) -> bool:
        """Worth a read: indexed, or unknown to the index (``presence`` is not False)."""
        return self.presence(key) is not False

    def has(self, key: BlockKey) -> bool:
        """Index lookup, or where the index cannot tell (``presence`` is None) the shared store's
        rows (a fleet's block is stored only when its row is) or else the backend."""
        known = self.presence(key)
        if known is not None or self.backend is None:
            return bool(known)
        if self._shared_rows():
            return self._lookup(key)
        try:
            return self.backend.exists(key)
        except OSError:
            return False

    def touch(self, keys: Sequence[BlockKey], *, request_done: bool = False) -> None:
        """``keys`` were used now in a cache above this tier, in order (the last is the most recent).

        A tier above served them (a write-through copy here never sees those reads: without
        them this policy evicts the blocks used most, and once the tier above evicts them too
        they are read from the slowest tier; ``bench staging``), or an engine reports the chunks
        a request used in its own cache (vLLM's CPU tier). Kept with their time and applied under
        the lock just before the policy next chooses a victim (``_apply_uses``); no lock and no
        copy here (``keys`` must not change afterwards): the callers are a get's worker and the
        engine's scheduler thread, which must not wait while an I/O thread holds the lock, and
        applying them at once took the GIL from the woken caller of a get (``bench staging``'s
        all-DRAM loads: 0.90-1.37 ms p50 against 0.73-0.81). With ``request_done`` they are
        the chain of a request that just finished (``EvictionPolicy.request_done``).
        """
        self._uses_pending.append((time.monotonic(), keys, request_done))

    def _mark_used(self, keys: Sequence[BlockKey], at: float, request_done: bool) -> None:
        """Each held one of ``keys`` was used at ``at``: its policy's ``touch`` (``request_done``
        for a finished request's chain) and the prefix guard's clock, which learns return gaps
        from it (caller holds ``lock``)."""
        index, prefixes = self.index, self._prefixes
        use = self.policy.request_done if request_done else self.policy.touch
        for key in keys:
            if key in index:
                use(key)
                prefixes.used(key, at, request_done=request_done)

    def expect(self, keys: Sequence[BlockKey]) -> None:
        """A stager expects the stored ones of ``keys`` to be read soon (``EvictionPolicy.expect``).

        In-memory only, like ``touch``, but not a use: the prefix guard's idle clock and a
        policy that learns from reads are left alone.
        """
        with self.lock:
            index, policy = self.index, self.policy
            for key in keys:
                if key in index:
                    policy.expect(key)

    def _apply_uses(self) -> None:
        """Apply the uses ``touch`` kept, each at its own time (caller holds ``lock``): the prefix
        guard gets it as an argument, the policy from its clock (``_policy_now``).

        Only this pops, under the lock; ``touch`` only appends, which never shortens the deque
        (past ``maxlen`` an append drops one from the left and adds one): the ``len`` taken here
        can be popped, and later uses wait for the next victim choice.
        """
        pending = self._uses_pending
        try:
            for _ in range(len(pending)):
                at, keys, request_done = pending.popleft()
                self._use_at = at
                self._mark_used(keys, at, request_done)
        finally:
            self._use_at = None

    def _policy_now(self) -> float:
        """The policy's clock (``EvictionPolicy.clock``): the time of the use being applied, else
        now. Without it a session's reads, kept for seconds or minutes until the next victim
        choice, would all look as if made at that moment (tests/core/test_cache.py)."""
        at = self._use_at
        return time.monotonic() if at is None else at

    def _forget(self, key: BlockKey, *, row_gone: bool = False) -> int:
        """Remove ``key`` from index and policy (caller holds ``lock``); return its size.

        Its manifest row goes too, unless ``row_gone``: the shared store already removed it
        (evicted it itself, or another node did).
        """
        size = self.index.pop(key, 0)
        self.used -= size
        if self._raw:
            self._raw.pop(key, None)
        if key == self._compact_key:
            self._compact_lost = True
        self._prefixes.forget(key)
        self.policy.remove(key)
        if self.manifest is not None and not row_gone:
            self.manifest.record_delete(key)
        return size

    # ------------------------------------------------------------------ put

    def store(self, key: BlockKey, raw: memoryview, layout: KVLayout | None, hint: BlockHint | None, *,
              evictable: Callable[[BlockKey], bool | None] | None = None) -> StoreOutcome:
        """Encode and store one block; what happened, never an exception (``StoreOutcome``:
        truthy when the tier holds the block now, stored or already held).

        ``evictable`` (a stager's store) judges victims: the block then goes only into free room
        or over victims it accepts, and never waits for in-flight writes (see ``_reserve``).
        """
        backend = self.backend
        if not self.up or backend is None:
            return StoreOutcome.FAILED
        if key in self.index:  # content-addressed: same key, same bytes
            held = self._row_held(key)
            if held is None:
                return StoreOutcome.FAILED
            if held:
                with self.lock:
                    self.policy.touch(key)
                return StoreOutcome.HELD
        with self.lock:
            if not self.policy.admit(key, raw.nbytes, hint):  # bypass: store nothing, evict nothing
                self.stats.bypassed += 1
                return StoreOutcome.BYPASSED
        codec = self._codec_now(backend)  # one codec for encode and meta, even if replace_codec runs meanwhile
        depth = hint.depth if hint is not None and self.cfg.keep_prefixes else None
        # Room first, on the size this codec's blocks have come to so far, then encode: on a
        # full tier most stores are declined, and an encode for a declined block is CPU taken
        # from the engine for nothing (a lossless encode is ~0.5 ms per 737 KB chunk).
        estimate = self._expected_payload(codec.tag, raw.nbytes) + BLOCK_OVERHEAD
        victims = self._reserve(key, estimate, backend, depth, evictable)
        if victims is None:
            return StoreOutcome.DECLINED
        self._drop(victims)
        # The codec's payload is settled against the reservation, made into a block and signed
        # by ``finish``: after a whole encode here, or inside ``put_stream`` once a streaming
        # encoder (whose settled bytes the backend writes as they are coded) is done.
        settled: list[int] = []  # [bytes reserved now, payload bytes] once finish ran

        def finish(pieces: Sequence[Buffer], params: dict[str, Any]) -> BlockMeta | None:
            self.codec_layout = layout
            payload_len = sum(memoryview(p).nbytes for p in pieces)
            reserved = self._settle_reservation(key, estimate, payload_len + BLOCK_OVERHEAD, backend, depth,
                                                evictable)
            if reserved is None:  # the reservation is given back
                return None
            settled[:] = [reserved, payload_len]
            meta = BlockMeta.new(key, raw.nbytes, codec=codec.tag, codec_params=params,
                                 tag=hint.tag if hint else None)
            if layout is not None:
                meta.dtype, meta.shape, meta.axes = layout.dtype, list(layout.shape), list(layout.axes)
            if self.signer is not None:
                meta.mac = self.signer.sign(meta, pieces)
            return meta

        encoder = None
        try:
            if codec.identity:
                pieces, params = codec.encode(raw, layout)
            else:
                out = memoryview(self._encode_out.get(raw.nbytes))[: raw.nbytes]
                encoder = codec.stream_encoder(raw, layout, out)
                if encoder is None:
                    pieces, params = codec.encode_into(raw, layout, out)
                else:
                    encoder = _GuardedEncoder(encoder)
        except Exception as exc:
            return self._encode_failed(codec, exc, estimate)
        try:
            if encoder is not None:
                stored = backend.put_stream(key, encoder, finish)
            else:
                meta = finish(pieces, params)
                stored = None if meta is None else backend.put(key, pieces, meta)
            if stored is None:
                return StoreOutcome.DECLINED
            evicted = self._publish(key, raw.nbytes, stored, codec.tag, hint.tag if hint else None)
        except _EncodeFailed as failed:
            return self._encode_failed(codec, failed.__cause__, settled[0] if settled else estimate)
        except Exception as exc:
            with self.lock:
                self.reserved -= settled[0] if settled else estimate
                self._space.notify_all()
            self._io_error(exc)
            return StoreOutcome.FAILED
        estimate, payload_len = settled
        if evicted:  # by a shared store, fleet-wide: rows gone, blocks deleted now (no lock held)
            with self.lock:
                dropped = [(victim, self._forget(victim, row_gone=True)) for victim in evicted]
                self.stats.evictions += len(evicted)
            self._drop(dropped)
        with self.lock:
            self.reserved -= estimate
            self._space.notify_all()
            old = self.index.get(key)
            if old is not None:
                self.used -= old
            self.index[key] = stored
            self.used += stored
            if depth is not None:
                self._prefixes.stored(key, depth, time.monotonic())
            self.policy.insert(key, stored, hint)
            self.stats.puts += 1
            self.stats.bytes_written += stored
            self.stats.raw_bytes_written += raw.nbytes
            payload, raw_total = self._encoded.get(codec.tag, (0, 0))
            self._encoded[codec.tag] = (payload + payload_len, raw_total + raw.nbytes)
            if codec.identity and not self._identity and not self._shared_rows():  # raw below codec_from_fill
                self._raw[key] = None
                compact = False
            else:  # encoded: the fill is reached, so blocks stored raw before are re-encoded now
                compact = bool(self._raw) and not self._compacting
                self._compacting = self._compacting or compact
        self._io_ok()
        if compact:
            self._start_compaction()
        return StoreOutcome.STORED

    def _encode_failed(self, codec: Codec, exc: BaseException | None, reserved: int) -> StoreOutcome:
        log.warning("tier %s: codec %s failed to encode: %s", self.name, codec.tag, exc)
        with self.lock:
            self.reserved -= reserved
            self._space.notify_all()
            self.stats.errors += 1
        return StoreOutcome.FAILED

    def _expected_payload(self, tag: str, raw_len: int) -> int:
        """Payload bytes a block of ``raw_len`` is expected to take under codec ``tag``: its
        blocks' average so far (raw size before the first)."""
        payload, raw_total = self._encoded.get(tag, (0, 0))
        return raw_len if raw_total == 0 else -(-raw_len * payload // raw_total)

    def _settle_reservation(self, key: BlockKey, reserved: int, needed: int, backend: Backend,
                            depth: int | None, evictable: Callable[[BlockKey], bool | None] | None) -> int | None:
        """Turn a reservation made on an expected size into one of the ``needed`` bytes the
        encoded block takes: give back what is over, reserve what is short (None, with the first
        reservation given back too, when that is declined). The bytes reserved now."""
        if needed <= reserved:
            if needed < reserved:
                with self.lock:
                    self.reserved -= reserved - needed
                    self._space.notify_all()
            return needed
        victims = self._reserve(key, needed - reserved, backend, depth, evictable, held=reserved)
        if victims is None:
            with self.lock:
                self.reserved -= reserved
                self._space.notify_all()
            return None
        self._drop(victims)
        return needed

    def _row_held(self, key: BlockKey) -> bool | None:
        """Whether an indexed ``key`` is still stored: always on a local tier; on a shared one
        while its row exists (another node may have evicted it: then it is forgotten here).
        None: the shared store did not answer."""
        if not self._shared_rows():
            return True
        assert self.manifest is not None
        try:
            held = self.manifest.lookup(key) is not None
        except ManifestError as exc:
            self._io_error(exc)
            return None
        if not held:
            with self.lock:
                self._forget(key, row_gone=True)
        return held

    def _reserve(self, key: BlockKey, estimate: int, backend: Backend,
                 depth: int | None = None,
                 evictable: Callable[[BlockKey], bool | None] | None = None,
                 held: int = 0) -> list[tuple[BlockKey, int]] | None:
        """Pick victims so that ``estimate`` more bytes fit; reserve them. None: cannot fit.

        Space held by in-flight writes is not evictable yet: wait (bounded) for them to land
        rather than exceed the capacity or give up at once. With ``depth`` (``keep_prefixes``: the
        incoming block is a session's) each victim must be idle for longer than sessions take
        to return or stored without a depth (``PrefixGuard.protects``), or one its session left
        (``EvictionPolicy.abandoned``); at the first that is none of these the incoming
        block is declined (``stats.declined``) and nothing waits. Victims taken before that
        stay evicted: their space serves the next store. ``evictable`` (a staging store)
        judges each victim first: True takes it and False keeps it whatever the guard says (the
        stager knows when its session is back), None leaves it to the guard. Such a store looks
        past a victim it may not take to the first of the policy's next picks it may
        (``_next_evictable``), declining only when there is none (not counted in
        ``stats.declined``), and never waits: staging must not hold a thread.
        ``held``: bytes this store has reserved already (``_settle_reservation``): they count as
        taken, but are never waited for (they land only after this call returns).
        """
        if estimate + held > self.capacity:
            return None
        capacity = self._local_capacity()
        try:
            fs_free = backend.free_bytes()
        except OSError:
            fs_free = None
        victims: list[tuple[BlockKey, int]] = []
        refused: set[BlockKey] = set()  # victims vetoed, by ``evictable`` or the prefix guard

        def accepts(victim: BlockKey) -> bool:
            verdict = None if evictable is None else evictable(victim)
            if verdict is not None:
                return verdict
            return depth is None or not self._prefixes.protects(victim, time.monotonic()) \
                or self.policy.abandoned(victim)

        freed = 0
        deadline = time.monotonic() + RESERVE_WAIT_S
        with self.lock:
            self._apply_uses()
            while True:
                # the filesystem must hold this block and every reserved one (reserve_free_gb kept)
                fs_short = 0 if fs_free is None else estimate + self.reserved - fs_free - freed
                declined = False
                while self.used + self.reserved + estimate > capacity or fs_short > 0:
                    victim = self.policy.victim(key)
                    if victim is None:
                        break
                    if not accepts(victim):
                        found = None if evictable is None else self._next_evictable(key, victim, accepts, refused)
                        if found is None:
                            declined = True
                            break
                        victim = found
                    size = self._forget(victim)
                    freed += size
                    fs_short -= size
                    victims.append((victim, size))
                    self.stats.evictions += 1
                fits = self.used + self.reserved + estimate <= capacity and fs_short <= 0
                remaining = deadline - time.monotonic()
                if fits or declined or self.reserved == held or remaining <= 0 or evictable is not None:
                    break
                self._space.wait(remaining)
            if fits:
                self.reserved += estimate
            elif declined and evictable is None:
                self.stats.declined += 1
        if not fits:
            self._drop(victims)
            return None
        return victims

    def _next_evictable(self, key: BlockKey, first: BlockKey, accepts: Callable[[BlockKey], bool],
                        refused: set[BlockKey]) -> BlockKey | None:
        """The first of the policy's next ``VICTIM_LOOKAHEAD`` picks that ``accepts`` takes, after it
        refused ``first`` (caller holds ``lock``); None: every one is refused.

        A stager keeps the blocks of sessions expected back sooner, and an LRU tier's oldest
        blocks are often just those (staged earlier, for an earlier return): declining at the
        first of them left the room of blocks nobody expects back to the next engine store
        (``bench staging``, DRAM of two sessions: 732 of 1,711 staging stores into DRAM
        declined). ``refused`` carries the vetoes over the store's victims, so each is asked once.
        """
        refused.add(first)
        for candidate in self.policy.victims(key, VICTIM_LOOKAHEAD):
            if candidate in refused:
                continue
            if accepts(candidate):
                return candidate
            refused.add(candidate)
        return None

    def discard(self, keys: Sequence[BlockKey], *, demote: bool = True) -> int:
        """Evict ``keys`` now, like the policy's victims (write-back tiers below get them first,
        unless not ``demote``: the caller keeps them elsewhere, as an engine's own cache does).

        For a stager taking back copies it placed and nobody used, and for blocks an engine
        gives up (``TieredCache.submit_put(replacing=...)``). Returns the bytes freed.
        """
        with self.lock:
            victims = [(key, self._forget(key)) for key in keys if key in self.index]
        self._drop(victims, demote=demote)
        return sum(size for _key, size in victims)

    def _drop(self, victims: list[tuple[BlockKey, int]], *, demote: bool = True) -> None:
        """Delete evicted blocks in one bulk call (S3 runs it concurrently), demoting them first to a
        write-back tier below."""
        backend = self.backend
        if not victims or backend is None:
            return
        target = self.demotion_target if demote else None
        if target is not None:
            for key, _size in victims:
                self._demote(key, target)
        for failure in backend.delete_many([key for key, _size in victims]):
            if failure is not None:
                self._io_error(failure)
        self._tell_removed([key for key, _size in victims])

    def _tell_removed(self, keys: list[BlockKey]) -> None:
        """A batch gone from this tier, to ``on_removed`` and to each listening namespace its keys
        (after any demotion below, so a listener may ask the cache whether a lower tier still holds them)."""
        if self.on_removed is not None:
            try:
                self.on_removed(self, keys)
            except Exception:  # a listener's failure never fails our I/O
                log.exception("tier %s: removal listener failed", self.name)
        listeners = self.removal_listeners
        if not listeners:
            return
        mine: dict[str, list[BlockKey]] = {}
        for key in keys:
            if key.namespace in listeners:
                mine.setdefault(key.namespace, []).append(key)
        for namespace, gone in mine.items():
            try:
                listeners[namespace](gone)
            except Exception:  # a listener's failure never fails our I/O
                log.exception("tier %s: removal listener of namespace %s failed", self.name, namespace)

    def _demote(self, key: BlockKey, lower: Tier) -> None:
        assert self.backend is not None
        try:
            meta, payload = self.backend.read(key)
            raw = bytearray(meta.raw_len)
            _DecodeInto(memoryview(raw), self._codec_for, self.signer).whole(meta, payload)
        except (KeyError, OSError, LifeboatError, ValueError):
            return
        lower.store_passing_bypass(key, memoryview(raw), layout_from_meta(meta), None)

    @property
    def demotion_target(self) -> Tier | None:
        """The tier that gets this tier's evicted blocks: the next one down, if it is up and write-back."""
        lower = self.lower
        return lower if lower is not None and lower.write_mode == "back" and lower.up else None

    def store_passing_bypass(self, key: BlockKey, raw: memoryview, layout: KVLayout | None,
                             hint: BlockHint | None) -> StoreOutcome:
        """``store``; a block this tier's policy bypasses goes on to its ``demotion_target``, and so on
        down: a bypass means not worth the room in that tier, not "drop it" (demotions, and blocks
        ``TieredCache.submit_put``'s last tier bypassed)."""
        tier: Tier = self
        while (outcome := tier.store(key, raw, layout, hint)) is StoreOutcome.BYPASSED:
            below = tier.demotion_target
            if below is None:
                break
            tier = below
        return outcome

    # ------------------------------------------------------------------ get

    def fetch(self, key: BlockKey, dest: memoryview, *, use: bool = True) -> BlockMeta | None:
        """Read, verify and decode ``key`` into ``dest``; None (a miss) on any failure.

        ``use=False`` for a read that is not the engine's (the stager copying a block up): its
        bytes count as read, but it is no hit and no use, so the policy's recency and the return
        rhythm it learns (EpiCache: a visit is a touch) follow the engine's reads only.
        """
        backend = self.backend
        if not self.up or backend is None:
            return None
        wanted, stored = self._to_read(key)
        if not wanted:
            return None
        try:
            if self._identity or _stored_raw(stored, dest):  # the payload is the raw bytes: read straight into dest
                meta, stored_len = self._raw_into(dest, *backend.read(key, dest))
            else:  # decoded from the backend's own buffer as it is read, nothing copied or allocated
                meta, stored_len = backend.read_payload(key, _DecodeInto(dest, self._codec_for, self.signer), stored)
        except BLOCK_ERRORS as exc:
            self._read_failed(key, exc)
            return None
        self._count_reads([(key, stored, stored_len)],
                          [key] if meta.codec == RAW_CODEC and self._learns_raw() else (), use=use)
        return meta

    def fetch_many(self, keys: Sequence[BlockKey], dests: Sequence[memoryview]) -> list[BlockMeta | None]:
        """``fetch`` of every key: read, verify and decode ``keys[i]`` into ``dests[i]``; None where that fails.

        One bulk backend call for all of them (a store that pays a round trip per request runs
        them concurrently: a batch costs about one round trip, not one per block) and one hold
        of the tier lock to account the blocks found. One key is a plain ``fetch`` (no lists).
        """
        if len(keys) == 1:
            return [self.fetch(keys[0], dests[0])]
        results: list[BlockMeta | None] = [None] * len(keys)
        backend = self.backend
        if not self.up or backend is None:
            return results
        wanted: list[int] = []
        sizes: list[int | None] = []
        for i, key in enumerate(keys):
            to_read, stored = self._to_read(key)
            if to_read:
                wanted.append(i)
                sizes.append(stored)
        if not wanted:
            return results
        wanted_keys = [keys[i] for i in wanted]
        wanted_dests = [dests[i] for i in wanted]
        # a raw payload (an identity tier's, or a block stored below codec_from_fill) is read straight
        # into dest; a coded one is decoded from the backend's own buffer as it is read
        direct: Sequence[int] = range(len(wanted))
        coded: Sequence[int] = ()
        if not self._identity:
            direct, coded = [], []
            for n, dest in enumerate(wanted_dests):  # _stored_raw, inline: one comparison per block
                (direct if (sizes[n] or 0) > dest.nbytes else coded).append(n)
        outcomes: list[Any] = [None] * len(wanted)
        if len(direct) == len(wanted):  # all raw (an identity tier): the lists as they are, no copies
            read = backend.read_many(wanted_keys, wanted_dests)
        elif direct:
            read = backend.read_many([wanted_keys[n] for n in direct], [wanted_dests[n] for n in direct])
        if direct:
            for n, outcome in zip(direct, read, strict=True):
                outcomes[n] = (outcome if isinstance(outcome, Exception)
                               else outcome_of(self._raw_into, wanted_dests[n], *outcome))
        if coded:
            sinks = [_DecodeInto(wanted_dests[n], self._codec_for, self.signer) for n in coded]
            read = backend.read_payload_many([wanted_keys[n] for n in coded], sinks, [sizes[n] for n in coded])
            for n, outcome in zip(coded, read, strict=True):
                outcomes[n] = outcome
        found: list[tuple[BlockKey, int | None, int]] = []
        raw_found: list[BlockKey] = []
        learns = self._learns_raw()
        for i, key, stored, outcome in zip(wanted, wanted_keys, sizes, outcomes, strict=True):
            if isinstance(outcome, Exception):
                self._read_failed(key, outcome)
            else:
                results[i] = outcome[0]
                found.append((key, stored, outcome[1]))
                if learns and outcome[0].codec == RAW_CODEC:
                    raw_found.append(key)
        if found:
            self._count_reads(found, raw_found)
        return results

    def _learns_raw(self) -> bool:
        """Whether the raw blocks this tier loads join ``_raw``: a coding tier with ``codec_from_fill``
        may hold raw blocks it does not know as raw, stored by an earlier process (its index holds
        sizes, not codecs). Learnt on its first load, such a block is compacted once the tier fills;
        one never loaded again is cold, and leaves by eviction."""
        return not self._identity and self.cfg.codec_from_fill > 0

    def job_slices(self, blocks: int) -> int:
        """Into how many tasks (one per I/O thread) a job's ``blocks`` here are split.

        Up to ``io_threads``; one where the backend's I/O is a memory copy under the GIL
        (``Backend.parallel_io`` False) and no codec works on the blocks (a codec's C code runs
        beside other threads; a copy does not), so the job pays one thread hand-off, not one per
        slice. 36 DRAM blocks on a 2-core box (bench/results/dram-get-2026-12-06): 32 KiB load in
        0.26-0.28 ms p50 as one task against 0.32-0.35 as four, 720 KiB at a p99 of 2.4-2.8 ms
        against 3.4-3.9.
        """
        if self._identity and not self._parallel_io:
            return 1
        return min(blocks, self.io_threads)

    def count(self, *, misses: int = 0, promotions: int = 0) -> None:
        """Count gets this tier could not serve and blocks promoted into it (the cache's jobs decide
        where a get goes and what is promoted; the counters are the tier's)."""
        with self.lock:
            self.stats.misses += misses
            self.stats.promotions += promotions

    def begin_index_load(self) -> bool:
        """Claim the rebuild of the index: False when it is complete or already being loaded."""
        with self.lock:
            if self.index_complete or self.index_loading:
                return False
            self.index_loading = True
            return True

    def link_below(self, lower: Tier | None) -> None:
        """The tier below in the cache's order (write-back demotions go there); None unlinks."""
        self.lower = lower

    def _to_read(self, key: BlockKey) -> tuple[bool, int | None]:
        """Whether to ask the backend for ``key``, and the stored size the index holds (None: unknown)."""
        stored = self.index.get(key)
        if stored is None:
            if self._shared_rows():  # a fleet's block is stored only with its row: ask (on the read pool)
                if not self._lookup(key):
                    return False, None
                stored = self.index.get(key)
            elif self.index_complete and not self.cfg.shared:
                return False, None
        return True, stored

    def _raw_into(self, dest: memoryview, meta: BlockMeta, payload: memoryview) -> tuple[BlockMeta, int]:
        """Check (or, when not read into ``dest``, decode) a block an identity tier read."""
        if payload.obj is not dest.obj or not self._codec_for(meta.codec).identity:
            # not read into dest, or a block an earlier codec of this tier wrote
            _DecodeInto(dest, self._codec_for, self.signer).whole(meta, payload)
        else:
            if self.signer is not None:
                self.signer.verify(meta, (payload,))
            if meta.raw_len != dest.nbytes:
                raise IncompatibleBlockError(f"block holds {meta.raw_len} bytes, caller expects {dest.nbytes}")
        return meta, payload.nbytes

    def _read_failed(self, key: BlockKey, exc: Exception) -> None:
        """A block ``fetch`` or ``fetch_many`` could not serve: forget, set aside or count it, by what failed."""
        if isinstance(exc, KeyError):
            with self.lock:
                gone = key in self.index
                if gone:
                    self._forget(key)
            if gone:  # its file vanished under us
                self._tell_removed([key])
        elif isinstance(exc, IncompatibleBlockError):  # valid, just not for this process: kept
            with self.lock:
                self.stats.incompatible_blocks += 1
            log.debug("tier %s: %s: %s", self.name, key.hex[:16], exc)
        elif isinstance(exc, TamperedBlockError):
            self._tampered(key, exc.reason)
        elif isinstance(exc, CorruptBlockError):
            self._corrupt(key, exc.reason)
        elif isinstance(exc, OSError):
            self._io_error(exc)
        else:
            raise exc

    def _count_reads(self, found: list[tuple[BlockKey, int | None, int]], raw: Sequence[BlockKey] = (),
                     *, use: bool = True) -> None:
        """Account blocks read (key, size the index had, stored size read), under one hold of the lock;
        ``raw``: those of them now known to be stored raw (``_learns_raw``); ``use``: see ``fetch``."""
        held: list[BlockKey] = []
        with self.lock:
            now = time.monotonic()
            if raw and not self._shared_rows():
                for key in raw:
                    if key in self.index and key != self._compact_key:
                        self._raw[key] = None
            for key, stored, stored_len in found:
                if stored is None and key not in self.index:  # found while the index was still loading
                    self.index[key] = stored_len
                    self.used += stored_len
                    self.policy.insert(key, stored_len, None)
                # evicted or discarded while it was read: the bytes served are right, but they are
                # deleted now, so the key must not come back into the index (a block it does not hold)
                if use and key in self.index:
                    self.policy.touch(key)
                    self._prefixes.used(key, now)
                    held.append(key)
                if use:
                    self.stats.hits += 1
                self.stats.bytes_read += self.index.get(key, stored or 0)
        if self.manifest is not None:
            for key in held:
                self.manifest.record_access(key)
        self._io_ok()

    def _corrupt(self, key: BlockKey, reason: str) -> None:
        with self.lock:
            self.stats.corrupt_blocks += 1
            self._forget(key)
        self._tell_removed([key])
        log.warning("tier %s: corrupt block %s… (%s): set aside, served as a miss", self.name, key.hex[:16], reason)
        try:
            assert self.backend is not None
            self.backend.quarantine(key, reason)
        except OSError:
            pass

    def _tampered(self, key: BlockKey, reason: str) -> None:
        """A block of a keyed tier that its key does not vouch for: set aside like a corrupt one."""
        with self.lock:
            self.stats.tampered_blocks += 1
            self._forget(key)
        self._tell_removed([key])
        log.warning("tier %s: block %s… failed its keyed integrity check (%s): set aside, served as a miss",
                    self.name, key.hex[:16], reason)
        try:
            assert self.backend is not None
            self.backend.quarantine(key, f"tampered: {reason}")
        except OSError:
            pass

    def _codec_now(self, backend: Backend) -> Codec:
        """The tier's codec, or none while the tier is filled less than ``codec_from_fill``.

        Compression costs the engine's cores time on every store and load; it pays only once
        capacity binds (more sessions fit). Below the threshold blocks are stored raw, above it
        encoded, and the blocks stored raw before are re-encoded in place (``_compact``): a tier
        that never fills never codes, one that fills ends up holding as much as one that always
        coded. Every block names its codec, so a tier holds both and reads either.
        """
        if self.cfg.codec_from_fill <= 0 or self._identity or self._filled(backend):
            return self.codec
        return self._codec_for(RAW_CODEC)

    def _filled(self, backend: Backend) -> bool:
        """Whether the tier is filled to ``codec_from_fill`` of its room (capacity, or what the filesystem has)."""
        held = self.used + self.reserved
        room = held + self._free(backend)
        return room <= 0 or held >= self.cfg.codec_from_fill * room

    def _start_compaction(self) -> None:
        """Queue a compaction pass on the write pool (niced: it runs in the time the engine leaves)."""
        try:
            self._compaction = self.write_pool.submit(self._compact)
        except RuntimeError:  # pool shut down (closing)
            with self.lock:
                self._compacting = False

    def wait_compaction(self, timeout: float | None = None) -> None:
        """Wait for the compaction pass queued last to stop (tests, ``TieredCache.drain``)."""
        pass_ = self._compaction
        if pass_ is not None:
            pass_.result(timeout)

    def _compact(self) -> None:
        """Re-encode the blocks stored raw, oldest first, while the tier stays filled to ``codec_from_fill``.

        Compaction instead of eviction: a block re-encoded in place frees about a third of its
        bytes (lossless, bf16) and stays a hit, where eviction would free all of them and lose it.
        One block at a time, so a pass never holds more than one write thread; a store that
        finds the fill reached queues the next pass once this one has stopped.
        """
        try:
            while True:
                backend = self.backend
                filled = backend is not None and self._filled(backend)  # a statfs: outside the lock
                with self.lock:
                    key = next(iter(self._raw), None) if filled and self.up and not self._closing else None
                    if key is None or backend is None:
                        self._compacting = False
                        return
                    del self._raw[key]
                    self._compact_key, self._compact_lost = key, False
                try:
                    self._compact_one(backend, key)
                finally:
                    with self.lock:
                        self._compact_key = None
        except Exception:  # a bug must not stop compaction for good: the next encoded store restarts it
            log.exception("tier %s: compaction failed", self.name)
            with self.lock:
                self._compacting = False

    def _compact_one(self, backend: Backend, key: BlockKey) -> None:
        """Re-encode one raw block under its key (the file is replaced atomically; a reader meanwhile
        gets either copy, each self-describing) and account its new size."""
        try:
            meta, payload = backend.read(key)
            if not self._codec_for(meta.codec).identity:
                return  # re-stored encoded meanwhile
            if self.signer is not None:
                self.signer.verify(meta, (payload,))
        except BLOCK_ERRORS as exc:
            self._read_failed(key, exc)
            return
        layout = layout_from_meta(meta)
        codec = self.codec
        try:
            out = memoryview(self._encode_out.get(payload.nbytes))[: payload.nbytes]
            pieces, params = codec.encode_into(payload, layout, out)
        except Exception as exc:
            log.warning("tier %s: codec %s failed to encode: %s", self.name, codec.tag, exc)
            return
        payload_len = sum(memoryview(p).nbytes for p in pieces)
        if payload_len >= meta.raw_len:  # nothing to gain: it stays raw
            return
        coded = BlockMeta.new(key, meta.raw_len, codec=codec.tag, codec_params=params, tag=meta.tag)
        coded.dtype, coded.shape, coded.axes = meta.dtype, meta.shape, meta.axes
        if self.signer is not None:
            coded.mac = self.signer.sign(coded, pieces)
        try:
            stored = backend.put(key, pieces, coded)
        except Exception as exc:
            self._io_error(exc)
            return
        with self.lock:
            gone = key not in self.index
            if not (gone or self._compact_lost):
                old = self.index[key]
                self.index[key] = stored
                self.used += stored - old
                self.stats.compacted += 1
                self.stats.compacted_bytes_saved += old - stored
                self.stats.compacted_bytes_written += stored
                payload_total, raw_total = self._encoded.get(codec.tag, (0, 0))
                self._encoded[codec.tag] = (payload_total + payload_len, raw_total + meta.raw_len)
                if self.manifest is not None:  # a local store's row (a dict update): shared ones never compact
                    self.manifest.commit_put(key, meta.raw_len, stored, codec.tag, meta.tag)
                self._space.notify_all()
        if gone:  # evicted or discarded while re-encoded: the copy just written must go too
            try:
                backend.delete(key)
            except (KeyError, OSError):
                pass
        self._io_ok()

    def _free(self, backend: Backend) -> int:
        """Bytes this tier can still take without evicting: capacity left, bounded by the filesystem's."""
        left = self._local_capacity() - self.used - self.reserved
        try:
            fs_free = backend.free_bytes()
        except OSError:
            fs_free = None
        if fs_free is not None:
            left = min(left, fs_free - self.reserved)
        return max(left, 0)

    def free_bytes(self) -> int:
        """What :meth:`_free` says, 0 for a tier that is down (it takes nothing)."""
        backend = self.backend
        return self._free(backend) if self.up and backend is not None else 0

    def has_room(self, raw_len: int) -> bool:
        """Whether a block of ``raw_len`` raw bytes would fit now without an eviction, on the size
        ``store`` reserves for it. Unlocked and not a reservation: for a caller deciding whether to
        read a block at all (the stager, for a plan that may take free room only)."""
        backend = self.backend
        if not self.up or backend is None:
            return False
        expected = self._expected_payload(self._codec_now(backend).tag, raw_len) + BLOCK_OVERHEAD
        return self._free(backend) >= expected

    def _codec_for(self, tag: str) -> Codec:
        """The codec that decodes blocks written as ``tag``: the tier's own for its name at any version
        it reads (an older one configured as this tier is: oscar finds its rotations), else one of
        that codec's default configuration."""
        codec = self._codecs.get(tag)
        if codec is not None:
            return codec
        name, _, version = tag.partition("@")
        try:
            cls = self.registry.load("codec", name)
        except LifeboatError as exc:
            raise IncompatibleBlockError(f"block written by codec {tag}, which is not available: {exc}") from exc
        if version not in {str(v) for v in (cls.version, *cls.reads_versions)}:
            raise IncompatibleBlockError(f"block written by codec {tag}; installed is {name}@{cls.version}")
        codec = self.codec if type(self.codec) is cls else cls()
        self._codecs[tag] = codec
        return codec

    # ------------------------------------------------------------------ live changes

    def resize(self, capacity_bytes: int) -> None:
        """Change the capacity now; a smaller one evicts (policy order) until the tier fits."""
        with self.lock:
            self.capacity = capacity_bytes
        self._evict_over_capacity()

    def replace_policy(self, cfg: TierConfig) -> None:
        """Switch to ``cfg``'s policy; stored blocks are handed to it in their current order."""
        policy = self.registry.load("policy", cfg.policy)(cfg.policy_config, seed=self.policy.seed)
        with self.lock:
            for key, size in self.index.items():
                policy.insert(key, size, None)
            self.policy = policy

    def set_config(self, cfg: TierConfig) -> None:
        """Run under ``cfg`` from now on: its write mode, health thresholds and ``stage`` switch
        (capacity, policy and codec change through :meth:`resize`, :meth:`replace_policy` and
        :meth:`replace_codec`, which move state)."""
        with self.lock:
            self.cfg = cfg
            self.write_mode = cfg.write

    def replace_codec(self, cfg: TierConfig) -> None:
        """Encode new writes with ``cfg``'s codec; blocks already stored still decode by their tag."""
        codec: Codec = self.registry.load("codec", cfg.codec)(cfg.codec_config)
        with self.lock:
            self._codecs[codec.tag] = codec
            self.codec = codec
            self._identity = codec.identity

    # ------------------------------------------------------------------ misc

    def sample(self) -> TierSample:
        """This tier now, for metrics, the dashboard and benches (never the put/get path).

        Counters, index size, capacity, codec and health are copied in one hold of the tier
        lock, so they agree with each other; the latency histograms (own locks) are read after.
        """
        with self.lock:
            counters = self.stats.as_dict()
            blocks, used, capacity = len(self.index), self.used, self.capacity
            up, reason, codec = self.up, self.reason, self.codec.tag
            index_complete, index_loading = self.index_complete, self.index_loading
        manifest = self.manifest
        return TierSample(
            name=self.name, backend=self.backend_name, codec=codec, codec_layout=describe_layout(self.codec_layout),
            policy=self.cfg.policy, persistent=bool(self.persistent), up=up, reason=reason,
            index_complete=index_complete, index_loading=index_loading, blocks=blocks, bytes_used=used,
            capacity_bytes=capacity, counters=frozen(counters),
            latency=frozen({op: hist.sample() for op, hist in self.latency.items()}),
            recovery=frozen(self.recovery.as_dict()),
            manifest_write_errors=manifest.write_errors if manifest is not None else 0,
        )

    def snapshot(self) -> dict[str, Any]:
        """Counters and occupancy as one dict (``TieredCache.stats()``), from :meth:`sample`."""
        return self.sample().stats()

    def health(self) -> dict[str, Any]:
        """Up/down, reason, index and recovery state (``TieredCache.health()``), from :meth:`sample`."""
        return self.sample().health()

    def close(self) -> None:
        self._closing = True
        self.read_pool.shutdown(wait=True)
        self.write_pool.shutdown(wait=True)
        if self.manifest is not None:
            try:
                self.manifest.close()
            except Exception as exc:
                log.warning("tier %s: manifest close failed: %s", self.name, exc)
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception as exc:
                log.warning("tier %s: close failed: %s", self.name, exc)


class _DecodeInto:
    """``Tier.fetch``'s ``PayloadSink``: checks that a block fits the caller's buffer, picks the
    codec its meta names and decodes into ``dest`` (a keyed tier's MAC checked first), fed in
    prefixes where the codec streams so that decoding overlaps the rest of the read."""

    __slots__ = ("_codec", "_codec_for", "_dest", "_meta", "_signer", "_stream")

    def __init__(self, dest: memoryview, codec_for: Callable[[str], Codec], signer: BlockSigner | None) -> None:
        self._dest = dest
        self._codec_for = codec_for
        self._signer = signer
        self._stream: StreamDecoder | None = None

    def begin(self, meta: BlockMeta, payload_len: int) -> bool:
        self._start(meta)
        if self._signer is None:  # a keyed tier decodes nothing before its MAC is checked
            self._stream = self._codec.stream_decoder(meta.codec_params, layout_from_meta(meta), self._dest,
                                                      payload_len)
        return self._stream is not None

    def feed(self, prefix: memoryview) -> None:
        assert self._stream is not None
        self._decoding(self._stream.feed, prefix)

    def end(self, payload: memoryview) -> None:
        if self._signer is not None:
            self._signer.verify(self._meta, (payload,))
        if self._stream is not None:
            self._decoding(self._stream.finish, payload)
        else:
            meta = self._meta
            self._decoding(self._codec.decode, payload, meta.codec_params, layout_from_meta(meta), self._dest)

    def whole(self, meta: BlockMeta, payload: memoryview) -> None:
        """Decode a payload read whole (into ``dest`` itself, when the tier reads copy-free)."""
        if payload.obj is self._dest.obj:
            payload = memoryview(bytes(payload))
        self._start(meta)
        self.end(payload)

    def _start(self, meta: BlockMeta) -> None:
        if meta.raw_len != self._dest.nbytes:
            raise IncompatibleBlockError(f"block holds {meta.raw_len} bytes, caller expects {self._dest.nbytes}")
        self._meta = meta
        self._codec = self._codec_for(meta.codec)

    def _decoding(self, step: Callable[..., None], *args: Any) -> None:
        try:
            step(*args)
        except CorruptBlockError:
            raise
        except Exception as exc:
            raise CorruptBlockError(f"codec {self._meta.codec} rejected the payload: {exc}") from exc


def _stored_raw(stored: int | None, dest: memoryview) -> bool:
    """Whether a block of a coding tier is stored uncoded, from the size its index holds: a coded
    payload is smaller than the raw bytes by more than a block's header and trailer, so a stored
    block larger than the caller's buffer holds them raw (stored below ``codec_from_fill``, also
    by an earlier process). Read straight into the buffer, it loads as without a codec; a block
    this misjudges is still decoded right (``Tier._raw_into``), only with a copy."""
    return stored is not None and stored > dest.nbytes


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


class _EncodeFailed(Exception):
    """A streaming encoder raised inside a backend's ``put_stream`` (the cause): a codec failure,
    not an I/O error of the tier."""


class _GuardedEncoder:
    """A ``StreamEncoder`` whose failures reach the tier as ``_EncodeFailed``; its other
    attributes (``out``, ``head_len``, ``finished``, ``length``) are the wrapped encoder's."""

    __slots__ = ("_inner",)

    def __init__(self, inner: StreamEncoder) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def step(self, stop: int) -> int:
        try:
            return self._inner.step(stop)
        except Exception as exc:
            raise _EncodeFailed() from exc

    def result(self) -> tuple[Sequence[Buffer], dict[str, Any]]:
        try:
            return self._inner.result()
        except Exception as exc:
            raise _EncodeFailed() from exc
