"""TieredCache: the engine-facing API over an ordered list of tiers (DESIGN §6).

The API is batched and non-blocking: ``submit_put`` / ``submit_get_into`` return a job id
at once, the work runs on each tier's I/O threads, and ``poll`` returns finished jobs.
Blocking helpers (``put``, ``get``, ``exists``, ``contains_prefix``) wrap them. Nothing
here raises into the engine for a storage problem: failures are misses (``False``).

Buffers handed to ``submit_put`` / ``submit_get_into`` must stay alive and unchanged until
the job is reported finished.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from typing_extensions import Buffer as _Buffer

from lifeboatcache_core import metrics
from lifeboatcache_core.abc import BlockHint, KVLayout
from lifeboatcache_core.chunkfile import payload_digest
from lifeboatcache_core.config import LifeboatConfig, TierConfig, config_from_env
from lifeboatcache_core.keys import BlockKey, Namespace
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_core.reconfigure import Plan, Reconfiguration, plan_config
from lifeboatcache_core.registry import PluginRegistry
from lifeboatcache_core.staging import Stager
from lifeboatcache_core.stats import CacheSample, CacheStats, StoreOutcome, frozen
from lifeboatcache_core.threads import name_os_thread
from lifeboatcache_core.tier import Tier, layout_from_meta

log = logging.getLogger("lifeboatcache")

JobKind = Literal["put", "get"]
_MONITOR_INTERVAL_S = 0.5


@dataclass
class JobResult:
    """A finished job: ``ok[i]`` says whether block ``i`` was stored (put) or found (get)."""

    job_id: int
    kind: JobKind
    ok: list[bool]
    #: from submit to the last block done: the tier's own time, not the caller's polling delay
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.ok)


@dataclass
class _Job:
    job_id: int
    kind: JobKind
    ok: list[bool]
    tasks: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0  # set when the last task is done
    #: called once when the last task is done, before the job is reported (a get's stager release)
    on_done: Callable[[], None] | None = None


def as_byte_view(buf: _Buffer) -> memoryview:
    """A flat byte view of any C-contiguous buffer (bytes, bytearray, numpy, torch via numpy).

    numpy dtypes the buffer protocol cannot describe (bfloat16 from ml_dtypes, float8) are
    viewed as uint8 first: the bytes are what we store.
    """
    try:
        view = memoryview(buf)
    except ValueError:
        view = memoryview(np.ascontiguousarray(buf).reshape(-1).view(np.uint8))
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def stable_copy(view: memoryview, digest: bytes) -> memoryview | None:
    """A private copy of ``view`` if its bytes still hash to ``digest`` (xxh3-128), else None.

    The copy is hashed, not the source: bytes that change during the copy fail the check
    instead of being stored.
    """
    copy = np.empty(view.nbytes, np.uint8)
    copy[:] = np.frombuffer(view, np.uint8)
    mine = memoryview(copy)
    return mine if payload_digest([mine]) == digest else None


_STORED, _HELD, _BYPASSED = StoreOutcome.STORED, StoreOutcome.HELD, StoreOutcome.BYPASSED


class TieredCache:
    """Ordered tiers with capacity, eviction, promotion, health and metrics."""

    def __init__(self, config: LifeboatConfig | None = None, *, registry: PluginRegistry | None = None,
                 seed: int = 0, background_index: bool = True) -> None:
        self.config = config if config is not None else LifeboatConfig()
        self.registry = registry or get_registry()
        self._seed = seed
        self._removal_listeners: dict[str, Callable[[list[BlockKey]], None]] = {}
        self.telemetry = CacheStats()
        #: predictive staging into ``stage = true`` tiers (:mod:`lifeboatcache_core.staging`); before
        #: the tiers, which tell it what they remove
        self.stager = Stager(lambda: self.tiers, self.telemetry.add)
        self.all_tiers: list[Tier] = [self.make_tier(tc) for tc in self.config.tiers]
        self._digest_bytes: dict[str, int | None] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._jobs: dict[int, _Job] = {}
        self._finished: collections.deque[_Job] = collections.deque()
        self._job_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._background: set[Future[Any]] = set()
        self._closed = threading.Event()
        self._background_index = background_index
        self._config_lock = threading.Lock()
        self.stager.configure(self.config.staging)
        self.last_reconfiguration: Reconfiguration | None = None
        for tier in self.all_tiers:
            if tier.open():
                self._start_index(tier)
        self._ensure_persistent_tier()
        self._link_tiers()
        self._monitor = threading.Thread(target=self._monitor_loop, name="lifeboat-health", daemon=True)
        self._monitor.start()
        self.stager.start()
        metrics.track(self)

    @classmethod
    def from_env(cls) -> TieredCache:
        """Open the cache from ``$LIFEBOAT_CACHE_CONFIG`` or the embedded defaults."""
        return cls(config_from_env())

    # ------------------------------------------------------------------ set-up

    def make_tier(self, tc: TierConfig) -> Tier:
        """Build (not open) the tier ``tc`` describes: the one factory for start, fallback and live changes.

        Every tier is a ``Tier``; what differs (a fleet's shared PostgreSQL rows, say) is the
        manifest store its ``manifest_url`` selects when it opens, so a tier added by
        ``apply_config`` is the same kind of tier it would be at start.
        """
        # one dict of removal listeners: a tier added later hears the same ones
        return Tier(tc, self.registry, seed=self._seed, removal_listeners=self._removal_listeners,
                    on_removed=self.stager.observe_removed)

    def listen_removed(self, namespace_id: str, listener: Callable[[list[BlockKey]], None] | None) -> None:
        """Call ``listener`` with batches of this namespace's keys that a tier no longer holds.

        For an engine that publishes what the cache holds (vLLM's KV events): a tier's own
        evictions, discards and blocks set aside as corrupt. Called on the thread that removed
        them (an I/O thread, or a caller's discard), after any demotion to a tier below, so the
        key may still be held lower down (ask ``presence``). It must be quick and never block.
        None stops it. No listener: one empty-dict check per removed batch.
        """
        if listener is None:
            self._removal_listeners.pop(namespace_id, None)
        else:
            self._removal_listeners[namespace_id] = listener

    def _start_index(self, tier: Tier) -> None:
        if not tier.begin_index_load():
            return
        if self._background_index:
            threading.Thread(target=tier.load_index, name=f"lifeboat-index-{tier.name}", daemon=True).start()
        else:
            tier.load_index()

    def _ensure_persistent_tier(self) -> None:
        """DESIGN §6: never silently memory-only. Add the local fallback tier if needed."""
        fb = self.config.fallback_local
        wanted_persistent = any(t.persistent for t in self.all_tiers)
        if not wanted_persistent or not fb.enabled:
            return
        if any(t.persistent and t.up for t in self.all_tiers):
            return
        reasons = "; ".join(f"{t.name}: {t.reason}" for t in self.all_tiers if t.persistent and not t.up)
        tc = TierConfig(name="fallback", backend="file", capacity_gb=fb.capacity_gb, path=str(fb.path))
        tier = self.make_tier(tc)
        if tier.open():
            log.warning("no persistent tier is up (%s); using local fallback %s", reasons, fb.path)
            self._start_index(tier)
        else:
            log.error("no persistent tier is up (%s) and the local fallback failed too: %s", reasons, tier.reason)
        self.all_tiers.append(tier)

    def _link_tiers(self) -> None:
        for upper, lower in itertools.pairwise(self.all_tiers):
            upper.link_below(lower)

    @property
    def tiers(self) -> list[Tier]:
        """Tiers that are up now, top first."""
        return [t for t in self.all_tiers if t.up]

    def register_namespace(self, namespace: Namespace) -> str:
        """Declare a namespace: keys in it must use its digest length; its source is stored."""
        ns_id = namespace.id
        self._digest_bytes[ns_id] = namespace.digest_bytes
        self._namespaces[ns_id] = namespace.describe()
        for tier in self.all_tiers:
            if tier.backend is not None and tier.up:
                try:
                    tier.backend.describe_namespace(ns_id, namespace.describe())
                except OSError as exc:
                    log.warning("tier %s: cannot store namespace description: %s", tier.name, exc)
        return ns_id

    def _valid(self, key: object) -> bool:
        """Whether ``key`` may be used: a ``BlockKey`` of its namespace's digest length.

        A ``BlockKey`` was fully checked when it was built (its constructor, ``_make`` and
        ``Namespace.key`` all run ``check_key``), so only the per-namespace digest length is
        left to check here: running the path checks again per key on every call doubled the
        cost of key checks on the engine's thread.
        """
        if not isinstance(key, BlockKey):
            return False
        expected = self._digest_bytes.get(key.namespace)
        if expected is not None and len(key.digest) != expected:
            log.debug("rejected key: namespace %r uses %d-byte digests, got %d", key.namespace, expected,
                      len(key.digest))
            return False
        return True

    # ------------------------------------------------------------------ jobs

    def _new_job(self, kind: JobKind, n: int) -> _Job:
        # tasks=1: the submitter's own hold, released by _finish_if_idle once every tier's tasks
        # are queued, so a fast first tier cannot finish (and report) the job before the second starts
        job = _Job(next(self._job_ids), kind, [False] * n, tasks=1)
        with self._lock:
            self._jobs[job.job_id] = job
        return job

    def _add_tasks(self, job: _Job, count: int) -> None:
        with self._lock:
            job.tasks += count

    def _task_done(self, job: _Job) -> None:
        with self._lock:
            job.tasks -= 1
            if job.tasks:
                return
            job.seconds = time.perf_counter() - job.started
        try:
            if job.on_done is not None:
                job.on_done()
        finally:
            with self._lock:
                self._finished.append(job)
        self.telemetry.job_latency[job.kind].observe(job.seconds)
        job.done.set()

    def _finish_if_idle(self, job: _Job) -> None:
        """Release the submitter's hold; the job finishes now if no task is left."""
        self._task_done(job)

    def _spread(self, job: _Job, tier: Tier, indices: list[int], work: Any, *, serial: bool = False) -> None:
        """Run ``work(tier, slice)`` over ``indices`` in ``tier.job_slices`` slices (one if ``serial``).

        Gets run on the tier's read pool, puts on its write pool: a load never waits behind stores.
        """
        if not indices:
            return
        pool = tier.read_pool if job.kind == "get" else tier.write_pool
        n = 1 if serial else tier.job_slices(len(indices))
        slices = [indices[i::n] for i in range(n)]
        self._add_tasks(job, len(slices))
        for part in slices:
            def run(part: list[int] = part) -> None:
                started = time.perf_counter()
                try:
                    work(tier, part)
                    tier.latency[job.kind].observe((time.perf_counter() - started) / len(part), len(part))
                except Exception:  # a bug must not hang the job: report its blocks as failed
                    log.exception("tier %s: unexpected error in %s job %d", tier.name, job.kind, job.job_id)
                finally:
                    self._task_done(job)
            try:
                pool.submit(run)
            except RuntimeError:  # pool shut down (closing)
                self._task_done(job)

    def submit_put(self, keys: Sequence[BlockKey], buffers: Sequence[_Buffer], *,
                   layout: KVLayout | None = None, hints: Sequence[BlockHint | None] | None = None,
                   digests: Sequence[bytes] | None = None, replacing: Sequence[BlockKey] = ()) -> int:
        """Store blocks; returns a job id. ``ok[i]`` is True once any tier holds block ``i``.

        Into the top tier and every write-through tier. A block the last of them bypasses (its
        policy does not ``admit`` it: ``StoreOutcome.BYPASSED``) goes to the write-back tier
        below it, which would otherwise get it only as a demotion: a copy, stored on that tier's
        write pool after the job (``drain`` waits for it), so its ``ok`` is False.

        ``digests``: the buffers are memory the caller no longer owns and that may be reused
        under us (an engine's offload region, after its transfer job ended). Each buffer is then
        copied first, and only a copy whose xxh3-128 equals ``digests[i]`` is stored: a buffer
        overwritten meanwhile is a miss (``ok`` False, ``stats.unstable_skipped``), never
        another block's bytes under this key.

        ``replacing``: blocks the caller gives up to make room for these (an engine whose own
        cache holds them too). Each tier discards them on its I/O thread, then stores these in
        one task, so the room they leave is there when the first of these reserves its own and
        goes to these blocks, not to whatever the policy would have evicted (or declined for).
        """
        if len(keys) != len(buffers):
            raise ValueError(f"{len(keys)} keys but {len(buffers)} buffers")
        if digests is not None and len(digests) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(digests)} digests")
        job = self._new_job("put", len(keys))
        self.telemetry.add(put_blocks=len(keys))
        views = [as_byte_view(b) for b in buffers]
        valid = [i for i, k in enumerate(keys) if self._valid(k)]
        if hints:
            self.stager.observe_put([keys[i] for i in valid], [views[i].nbytes for i in valid], layout,
                                    [hints[i] for i in valid])
        up = self.tiers
        targets = [t for j, t in enumerate(up) if j == 0 or t.write_mode == "through"]
        # A block the last target bypasses goes to the write-back tier below it (which would
        # otherwise get it only as that tier's demotion); one an upper target bypasses is held
        # by the write-through tier below it already.
        last = targets[-1] if targets else None
        below = last.demotion_target if last is not None else None

        given_up = [k for k in replacing if self._valid(k)]

        def work(tier: Tier, part: list[int]) -> None:
            if given_up:
                tier.discard(given_up, demote=False)
            down = below if tier is last else None
            for i in part:
                view = views[i] if digests is None else stable_copy(views[i], digests[i])
                if view is None:
                    self.telemetry.add(unstable_skipped=1)
                    continue
                outcome = tier.store(keys[i], view, layout, hints[i] if hints else None)
                if outcome is _STORED or outcome is _HELD:  # = bool(outcome), without a Python call per block
                    job.ok[i] = True
                elif outcome is _BYPASSED and down is not None:
                    # the caller owns its buffer again once the job ends: the store below gets a copy
                    self._store_below(down, keys[i], view if digests is not None else memoryview(bytes(view)),
                                      layout, hints[i] if hints else None)

        for tier in targets:
            self._spread(job, tier, valid, work, serial=bool(given_up))
        for tier in up:  # write-back tiers below hold copies too: off the caller's thread
            if given_up and tier not in targets:
                try:
                    tier.write_pool.submit(tier.discard, given_up, demote=False)
                except RuntimeError:  # pool shut down (closing)
                    pass
        self._finish_if_idle(job)
        return job.job_id

    def submit_get_into(self, keys: Sequence[BlockKey], buffers: Sequence[_Buffer]) -> int:
        """Read blocks into the caller's buffers; ``ok[i]`` True when ``buffers[i]`` holds block ``i``."""
        if len(keys) != len(buffers):
            raise ValueError(f"{len(keys)} keys but {len(buffers)} buffers")
        job = self._new_job("get", len(keys))
        self.telemetry.add(lookups=1, lookup_blocks=len(keys))
        views = [as_byte_view(b) for b in buffers]
        if self.stager.observe_get(keys):  # the keys are no staging store's victims until read
            job.on_done = lambda: self.stager.observe_read_done(keys)
        up = self.tiers
        groups: dict[int, list[int]] = {}
        misses = [0] * len(up)
        for i, key in enumerate(keys):
            if not self._valid(key):
                continue
            for j, tier in enumerate(up):
                if tier.may_have(key):
                    groups.setdefault(j, []).append(i)
                    break
                misses[j] += 1
        for j, count in enumerate(misses):
            if count:
                up[j].count(misses=count)

        def work(tier: Tier, part: list[int]) -> None:
            start = up.index(tier)
            served = hits = missed = 0
            asked = [keys[i] for i in part]
            found = tier.fetch_many(asked, [views[i] for i in part])
            for i, meta in zip(part, found, strict=True):
                if meta is not None:
                    if start > 0 and self.config.promote:
                        self._promote(keys[i], bytes(views[i]), layout_from_meta(meta), up[:start])
                else:
                    missed += 1
                    if not self._fetch_below(keys[i], views[i], up, start + 1):
                        continue
                job.ok[i] = True
                hits += 1
                served += views[i].nbytes
            if missed:
                tier.count(misses=missed)
            self.telemetry.add(lookup_hit_blocks=hits, bytes_served=served)
            if hits and start + 1 < len(up):
                used = [k for k, meta in zip(asked, found, strict=True) if meta is not None] if missed else asked
                for below in up[start + 1:]:
                    below.touch(used)

        for j, indices in groups.items():
            self._spread(job, up[j], indices, work)
        self._finish_if_idle(job)
        return job.job_id

    def _fetch_below(self, key: BlockKey, dest: memoryview, up: list[Tier], first: int) -> bool:
        """Fetch a block the tier above ``up[first]`` missed from the first lower tier that has it."""
        for j in range(first, len(up)):
            tier = up[j]
            meta = tier.fetch(key, dest) if tier.may_have(key) else None
            if meta is not None:
                if j > 0 and self.config.promote:
                    self._promote(key, bytes(dest), layout_from_meta(meta), up[:j])
                return True
            tier.count(misses=1)
        return False

    def _promote(self, key: BlockKey, data: bytes, layout: KVLayout | None, uppers: list[Tier]) -> None:
        for tier in uppers:
            def run(tier: Tier = tier) -> None:
                if tier.store(key, memoryview(data), layout, None):
                    tier.count(promotions=1)
            try:
                fut = tier.write_pool.submit(run)
            except RuntimeError:
                return
            with self._lock:
                self._background.add(fut)
            fut.add_done_callback(self._background_done)

    def _store_below(self, tier: Tier, key: BlockKey, data: memoryview, layout: KVLayout | None,
                     hint: BlockHint | None) -> None:
        """Store a block the tier above bypassed into write-back ``tier``, on its write pool (nobody
        waits for it; ``drain`` does); a bypass there sends it on down (``Tier.store_passing_bypass``)."""
        try:
            fut = tier.write_pool.submit(tier.store_passing_bypass, key, data, layout, hint)
        except RuntimeError:  # pool shut down (closing)
            return
        with self._lock:
            self._background.add(fut)
        fut.add_done_callback(self._background_done)

    def _background_done(self, fut: Future[Any]) -> None:
        with self._lock:
            self._background.discard(fut)

    def poll(self) -> list[JobResult]:
        """Jobs finished since the last poll (each reported once)."""
        out = []
        with self._lock:
            while self._finished:
                job = self._finished.popleft()
                self._jobs.pop(job.job_id, None)
                out.append(JobResult(job.job_id, job.kind, job.ok, job.seconds))
        return out

    def wait(self, job_id: int, timeout: float | None = None) -> JobResult:
        """Block until ``job_id`` finishes and return it (it is not reported by ``poll`` again)."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise KeyError(f"unknown or already reported job {job_id}")
        if not job.done.wait(timeout):
            raise TimeoutError(f"job {job_id} not finished after {timeout}s")
        with self._lock:
            self._jobs.pop(job_id, None)
            try:
                self._finished.remove(job)
            except ValueError:
                pass
        return JobResult(job.job_id, job.kind, job.ok, job.seconds)

    # ------------------------------------------------------------------ blocking helpers

    def put(self, keys: Sequence[BlockKey], buffers: Sequence[_Buffer], *,
            layout: KVLayout | None = None, hints: Sequence[BlockHint | None] | None = None) -> list[bool]:
        return self.wait(self.submit_put(keys, buffers, layout=layout, hints=hints)).ok

    def get(self, keys: Sequence[BlockKey], buffers: Sequence[_Buffer]) -> list[bool]:
        return self.wait(self.submit_get_into(keys, buffers)).ok

    def exists(self, keys: Sequence[BlockKey], *, blocking: bool = True) -> list[bool]:
        """Whether each key is stored; never verifies bytes.

        ``blocking=True`` (the default) asks storage where the index cannot tell (a tier still
        indexing, a shared tier): exact, but a backend round trip per such key. Engines call
        ``blocking=False`` from their scheduler thread: the index's answer only (``presence``),
        so a key only storage could confirm counts as absent; storing it again is harmless
        (content-addressed) and a read would still find it.
        """
        if not blocking:
            return [known is True for known in self.presence(keys)]
        up = self.tiers
        return [self._valid(k) and any(t.has(k) for t in up) for k in keys]

    def presence(self, keys: Sequence[BlockKey]) -> list[bool | None]:
        """Per key, what the tiers' in-memory indexes say, without I/O or waiting on a lock.

        True: an up tier holds it. False: no up tier can hold it. None: unknown without
        storage (a tier is still indexing, or is shared and another node may have written
        it): an engine that can ask again later checks it off its thread with ``exists``.
        """
        up = self.tiers
        out: list[bool | None] = []
        for key in keys:
            answer: bool | None = False
            if self._valid(key):
                for tier in up:
                    known = tier.presence(key)
                    if known:
                        answer = True
                        break
                    if known is None:
                        answer = None
            out.append(answer)
        return out

    def free_bytes(self) -> int:
        """What the bottom up tier can still take without evicting (0: from now on a store costs a block).

        The bottom tier is where the stack finally drops blocks (tiers above demote into it),
        so while it has room a store loses nothing. An engine with a cache above ours (vLLM's
        CPU tier) can keep a block only up there, instead of a second copy here, once this is
        below the block's size.
        """
        up = self.tiers
        return up[-1].free_bytes() if up else 0

    def contains_prefix(self, keys: Sequence[BlockKey]) -> int:
        """How many leading ``keys`` are present (a miss ends the prefix)."""
        up = self.tiers
        n = 0
        for key in keys:
            if not (self._valid(key) and any(t.has(key) for t in up)):
                break
            n += 1
        return n

    def touch(self, keys: Sequence[BlockKey], *, request_done: bool = False) -> None:
        """Mark stored blocks as used now, in order: the last key becomes the most recently used.

        For engines with a cache above ours (vLLM's CPU tier, SGLang's host cache): a chunk
        that keeps hitting up there is never read from here, and without this it would look
        coldest to our policy and be evicted first. No I/O and no lock: each tier applies the
        uses, at their time, when it next chooses a victim (``Tier.touch``), so the engine's
        scheduler thread never waits for an I/O thread that holds a tier's lock.
        ``request_done``: the keys are the chain of a request that has just finished, which a
        policy learning session rhythms reads as the start of the session's idle time
        (``EvictionPolicy.request_done``).
        """
        valid = [k for k in keys if self._valid(k)]
        if not valid:
            return
        for tier in self.tiers:
            tier.touch(valid, request_done=request_done)

    def discard(self, keys: Sequence[BlockKey]) -> int:
        """Remove ``keys`` from every up tier now, demoting none of them; returns the bytes freed.

        For an engine that deletes what it stored (LMCache's ``delete``, which its per-salt
        quota eviction calls): unlike a tier's own eviction, the blocks must not reappear in a
        tier below. On the caller's thread (the backends' deletes are I/O); removal listeners
        hear each tier's batch. A tier that is down keeps its copies until it is back.
        """
        valid = [k for k in keys if self._valid(k)]
        return sum(tier.discard(valid, demote=False) for tier in self.tiers) if valid else 0

    def drain(self, timeout: float | None = 30.0) -> None:
        """Wait for background work (promotions, then the tiers' compaction) to finish: for tests and clean shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._background)
            if not pending:
                break
            for fut in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                fut.result(remaining)
        for tier in self.all_tiers:
            tier.wait_compaction(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until every up tier's index is loaded; return whether they all are."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(t.index_complete for t in self.tiers):
                return True
            time.sleep(0.01)
        return False

    def record_lookup(self, tokens_requested: int, tokens_hit: int) -> None:
        """Adapters report token-level lookups (the engine's view of a prefix hit) for the hit-rate metrics."""
        self.telemetry.add(lookup_tokens=tokens_requested, lookup_hit_tokens=tokens_hit)

    # ------------------------------------------------------------------ staging hints

    def stage(self, session: str, eta_s: float) -> int:
        """Hint: ``session`` (its blocks' ``BlockHint.tag``) returns in ``eta_s`` seconds.

        For an agent framework or router that knows better than the eviction policy's estimate.
        Its blocks are staged into the ``stage = true`` tiers in time, in the background (never
        evicting a block that only that tier holds); returns how many of its blocks are known.
        """
        return self.stager.stage(session, eta_s)

    def release(self, session: str) -> int:
        """Hint: ``session`` is done or away for long: stop staging it, take back its unused staged copies.

        Returns the bytes taken back (counted as staged-and-wasted).
        """
        return self.stager.release(session)

    # ------------------------------------------------------------------ live configuration

    def apply_config(self, new_config: LifeboatConfig) -> list[str]:
        """Apply what can change while serving; return what needs a restart (one line each).

        Live: capacities, policies, codecs (for new writes), tiers added/removed/reordered,
        promotion, the local fallback, ``[staging]``. :func:`reconfigure.plan_config` decides
        from the two configs; this carries the plan out on the tiers this cache owns. Calls are
        serialised; the tier list is swapped as a new list, so I/O threads holding the old list
        keep a consistent view.
        """
        with self._config_lock:
            old_staging = self.config.staging
            self.last_reconfiguration = self._carry_out(plan_config(self.config, new_config))
            if new_config.staging != old_staging:
                self.stager.configure(new_config.staging)
                changed = {k: v for k, v in new_config.staging.model_dump().items()
                           if getattr(old_staging, k) != v}
                line = "staging: " + ", ".join(f"{k} {getattr(old_staging, k)} -> {v}" for k, v in changed.items())
                self.last_reconfiguration.applied.append(line)
                log.info("config: %s", line)
            else:
                self.stager.wake()  # a tier's ``stage`` may have changed
        return self.last_reconfiguration.restart

    def _carry_out(self, plan: Plan) -> Reconfiguration:
        """Bring the tier list to ``plan``: build added tiers, change kept ones, drop removed ones."""
        result = Reconfiguration()
        configured = {tc.label for tc in self.config.tiers}
        current = {t.name: t for t in self.all_tiers if t.name in configured}
        fallback = [t for t in self.all_tiers if t.name not in configured]  # added by _ensure_persistent_tier
        # New tiers are built first: a plugin that fails to load stops the change before anything moved.
        added = {tc.label: self.make_tier(tc) for tc in plan.tiers if tc.label in plan.add}
        tiers: list[Tier] = []
        for tc in plan.tiers:
            tier = added.get(tc.label) or current[tc.label]
            change = plan.change.get(tc.label)
            if change is not None:
                if change.capacity_bytes is not None:
                    tier.resize(change.capacity_bytes)
                if change.policy:
                    tier.replace_policy(change.in_force)
                if change.codec:
                    tier.replace_codec(change.in_force)
                tier.set_config(change.in_force)
                result.applied += change.applied
                result.restart += change.restart
            tiers.append(tier)
        removed = [current[name] for name in plan.remove]
        for tier in fallback:
            if plan.fallback_remove is not None:
                removed.append(tier)
                result.applied.append(f"fallback tier removed ({plan.fallback_remove})")
            else:
                if plan.fallback_capacity_bytes is not None:
                    tier.resize(plan.fallback_capacity_bytes)
                result.applied += plan.fallback_lines
                tiers.append(tier)
        if plan.fallback_changed and not fallback:
            result.applied.append("fallback_local updated")
        for tier in added.values():
            if tier.open():
                self._start_index(tier)
            result.applied.append(
                f"tier {tier.name} added ({tier.backend_name}, {tier.cfg.capacity_gb:g} GB)"
                + ("" if tier.up else f", but it is down: {tier.reason}")
            )
        if plan.reordered:
            result.applied.append("tier order: " + " -> ".join(t.name for t in tiers))
        result.applied += plan.applied
        result.restart += plan.restart
        for tier in tiers:
            tier.link_below(None)
        self.config = plan.running
        self.all_tiers = tiers  # a new list: readers holding the old one stay consistent
        self._ensure_persistent_tier()
        self._link_tiers()
        if len(self.all_tiers) > len(tiers):
            result.applied.append(f"fallback tier added: {self.all_tiers[-1].name} "
                                  f"({self.all_tiers[-1].reason or 'up'})")
        for tier in removed:
            result.applied.append(f"tier {tier.name} removed (its blocks stay in storage)")
            tier.close()
        for line in result.applied:
            log.info("config: %s", line)
        for line in result.restart:
            log.warning("config: %s", line)
        return result

    # ------------------------------------------------------------------ health, stats

    def _monitor_loop(self) -> None:
        name_os_thread("lifeboat-health")
        while not self._closed.wait(_MONITOR_INTERVAL_S):
            now = time.monotonic()
            for tier in list(self.all_tiers):
                if not tier.up:
                    if now >= tier.next_probe and tier.open():
                        self._start_index(tier)
                elif now >= tier.next_check:
                    tier.check()

    def sample(self) -> CacheSample:
        """Every tier's :meth:`Tier.sample` (top first) and the cache's own counters, for metrics.

        What :mod:`lifeboatcache_core.metrics`, the dashboard and the benches read instead of
        the tiers' attributes; each tier fills its part under its own lock. Not for the hot path.
        """
        return CacheSample(
            tiers=tuple(t.sample() for t in list(self.all_tiers)),
            counters=frozen(self.telemetry.counters()),
            job_latency=frozen({op: hist.sample() for op, hist in self.telemetry.job_latency.items()}),
        )

    def health(self) -> list[dict[str, Any]]:
        return [t.health() for t in self.sample().tiers]

    def stats(self) -> dict[str, dict[str, Any]]:
        return {t.name: t.stats() for t in self.sample().tiers}

    def close(self) -> None:
        """Finish queued work and release tiers. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.stager.close()
        metrics.untrack(self)
        for tier in self.all_tiers:
            tier.close()

    def __enter__(self) -> TieredCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
