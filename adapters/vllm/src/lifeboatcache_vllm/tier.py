"""``LifeboatTier``: a vLLM ``SecondaryTierManager`` backed by one lifeboatcache ``TieredCache``.

vLLM fans every chunk stored in its CPU tier out to its secondary tiers and promotes a
chunk from the first tier that has it. As one secondary tier, the whole lifeboatcache stack
(NVMe -> NFS -> S3 chaining, capacity and eviction, codecs, integrity checks) sits below
vLLM's CPU tier and costs one lookup.

Runs in the EngineCore process under the tiering manager's lock, so nothing here blocks:
``lookup`` answers from the cache's in-memory index (RETRY while a restarted tier is still
indexing and a background existence check is pending), stores and loads are batched
``submit_put``/``submit_get_into`` jobs on the cache's I/O threads, and results come back
through ``get_finished_jobs``. A block that fails its checks is a miss for that key only
(``successful_keys``): vLLM recomputes it. No tier failure ever raises into vLLM.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
from lifeboatcache_core.abc import BlockHint, KVLayout
from lifeboatcache_core.cache import JobResult as CacheJobResult
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import payload_digest
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.engine import EngineTexts, TiersUnavailableError, open_for_engine
from lifeboatcache_core.keys import BlockKey, Namespace
from lifeboatcache_core.threads import process_cpu_seconds, thread_cpu_seconds
from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

try:  # what vLLM's CPU tier records per request (see cpu_tier_uses)
    from vllm.v1.kv_offload.cpu.manager import _RequestCacheAccess
except ImportError:  # another vLLM: the shadow refreshes the whole chain instead
    _RequestCacheAccess = None

from lifeboatcache_vllm.cpu_shadow import CpuTierShadow
from lifeboatcache_vllm.fingerprint import namespace_for
from lifeboatcache_vllm.session import request_session
from lifeboatcache_vllm.settings import EXTRA_KEY, ensure_log_handler, on_error_of, resolve_config, vllm_settings

log = logging.getLogger("lifeboatcache.vllm")

#: how often a busy tier logs its ``cpu_report`` line (and once more at a clean shutdown)
CPU_LOG_INTERVAL_S = 30.0
#: a full tier stores a chunk kept only in vLLM's CPU tier once it is among that tier's coldest
#: this share of rows: vLLM allocates the rows of a step's stores before it tells us of them,
#: so the copy must start well before the chunk's turn to be dropped (see ``demotions_lost``)
DEMOTE_MARGIN_SHARE = 0.4
#: defer_promotions: chunks asked for and not asked again kept at most (oldest half dropped)
MAX_DEFERRED_LOOKUPS = 65536
#: KV events held for vLLM's next ``take_events`` at most (oldest dropped, counted in ``events_dropped``)
MAX_PENDING_EVENTS = 4096
#: chunks our tiers removed, held for the next ``take_events`` at most (the rest counted in ``removals_dropped``)
MAX_PENDING_REMOVALS = 65536
_ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass
class _Pending:
    """A vLLM job in flight as one cache job."""

    job_id: int
    keys: list[OffloadKey]
    is_load: bool
    nbytes: int
    req_id: str = ""
    hints: list[BlockHint | None] | None = None  # a load's, for the copies it leaves in both tiers


@dataclass
class _Deferred:
    """A chunk in vLLM's CPU tier: what it needs to be stored from its row later (a full tier
    left it there, or gave up its copy here for a chunk that tier was about to drop)."""

    digest: bytes  # xxh3-128 of the row while vLLM pinned it for one of our jobs
    hint: BlockHint | None
    submitted: bool = False


_F = TypeVar("_F", bound=Callable[..., Any])


def on_engine_thread(method: _F) -> _F:
    """Count the CPU time a call costs the engine's scheduler thread (it runs nothing else meanwhile)."""
    @functools.wraps(method)
    def timed(self: LifeboatTier, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._engine_thread_cpu_s += time.thread_time() - start
    return timed  # type: ignore[return-value]


def key_positions(req_context: ReqContext) -> dict[OffloadKey, int]:
    """End-token position of every offload key of a request ({} where vLLM does not record them).

    vLLM's scheduler records them in the request context (``set_offload_key_position``)
    whether the chunk hit in device KV, in its CPU tier or nowhere; its own CPU-tier LRU
    orders recency by them. vLLM 0.32/0.33 offer no public accessor for the whole map, so
    this reads ``_offload_key_positions``; another vLLM without it gets no recency updates
    and no hints, and nothing breaks.
    """
    positions = getattr(req_context, "_offload_key_positions", None)
    return positions if isinstance(positions, dict) else {}


def request_chain(req_context: ReqContext) -> list[OffloadKey]:
    """Every offload key of a request, head to tail: the chunks its prompt (and output) used."""
    positions = key_positions(req_context)
    return sorted(positions, key=positions.__getitem__)


def cpu_tier_uses(req_context: ReqContext) -> list[OffloadKey] | None:
    """The chunks vLLM's CPU tier refreshes as this request finishes, head to tail (None: not known).

    vLLM's CPU tier records per request only the chunks it loaded to the device or was offered
    to store (``_RequestCacheAccess`` in the request context), not those that hit in device KV,
    and its LRU refreshes exactly those (``LRUCachePolicy.on_request_finished``). Our model of
    that tier (``CpuTierShadow``) must refresh the same ones, or it keeps chunks vLLM has
    already dropped. A private class of vLLM 0.32/0.33: without it, None, and the caller falls
    back to the whole chain.
    """
    if _RequestCacheAccess is None:
        return None
    state = req_context.get_state(_RequestCacheAccess)
    if state is None:
        return None
    keys = [key for group in sorted(state.key_groups) for key in state.key_groups[group]]
    positions = key_positions(req_context)
    if all(key in positions for key in keys):
        keys.sort(key=positions.__getitem__)
    return keys


class LifeboatTierError(RuntimeError):
    """The tier could not start and ``engine.on_error = "fail"``."""


class LifeboatTierOSError(LifeboatTierError, OSError):
    """Its storage could not be used at start (a tier down, an OSError): vLLM's fs tier raises
    OSError for a bad ``root_dir``, so code written for vLLM's tiers catches this one too."""


class LifeboatTierValueError(LifeboatTierError, ValueError):
    """A bad value in its entry or config (``locality``, ...): ValueError, as vLLM's tiers raise."""


class LifeboatTierTypeError(LifeboatTierError, TypeError):
    """An unknown key in its ``secondary_tiers`` entry: TypeError, as an unknown keyword of vLLM's tiers."""


def _typed(exc: LifeboatTierError) -> LifeboatTierError:
    """The refusal as the built-in error vLLM's own tiers raise for the same cause (same message)."""
    cause = exc.__cause__
    if isinstance(cause, (OSError, TiersUnavailableError)):
        kind: type[LifeboatTierError] = LifeboatTierOSError
    elif isinstance(cause, ValueError):  # lifeboatcache_core's ConfigError is one
        kind = LifeboatTierValueError
    elif isinstance(cause, TypeError):
        kind = LifeboatTierTypeError
    else:
        return exc
    typed = kind(*exc.args)
    typed.__cause__ = cause
    return typed


class LifeboatTier(SecondaryTierManager):
    """lifeboatcache below vLLM's CPU tier. Extra keys of its ``secondary_tiers`` entry:

    ``config``: a lifeboatcache config mapping or a TOML/YAML path (default: the spec's
    ``kv_connector_extra_config["lifeboatcache"]``, else ``$LIFEBOAT_CACHE_CONFIG``, else
    one file tier under the user cache dir); ``locality``: "LOCAL" or "REMOTE" (exactly, as
    vLLM's ``Locality``; default none, as vLLM's fs tier); ``enable_kv_events``: publish a
    stored event for every chunk whose store has completed here, when vLLM's KV cache events
    are on (``kv_events_config.enable_kv_cache_events``), as vLLM's fs tier does.
    """

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None, locality: str | None = None,
                 config: dict[str, Any] | str | None = None, enable_kv_events: bool = False,
                 **unknown: Any) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        ensure_log_handler()
        self.cache: TieredCache | None = None
        self._pending: dict[int, _Pending] = {}
        self._ready: list[JobResult] = []
        self._lookups: dict[OffloadKey, Future[bool]] = {}
        # defer_promotions: chunks found here -> [scheduler step first asked in, live requests that
        # asked]; ``_askers``: request -> the chunks it asked for (dropped when it finishes)
        self._step = 0
        self._asked: dict[OffloadKey, list[int]] = {}
        self._askers: dict[str, set[OffloadKey]] = {}
        # promotion_budget: chunks answered HIT here per request let through and not scheduled yet
        # (each takes one row of vLLM's CPU tier; a chunk promoted again took the row it lost),
        # their count, the requests held back in this scheduler step, and the rows the budget allows
        self._promoting: dict[str, set[OffloadKey]] = {}
        self._promoting_total = 0
        self._held_back: set[str] = set()
        self._promotion_rows = 0
        self.promotion_counts = {"admitted": 0, "held_back": 0}
        #: promotion_budget: when each request now held back was first held back (monotonic s), and
        #: over the requests let through after a wait: how many, their total and longest wait
        self._held_since: dict[str, float] = {}
        self.promotion_waits = {"requests": 0, "total_s": 0.0, "max_s": 0.0}
        # per request: store jobs still in flight, and the recency update waiting for them
        self._stores_in_flight: dict[str, int] = {}
        self._touch_after: dict[str, list[BlockKey]] = {}
        # requests whose chain was marked used when vLLM first asked for it (``_mark_asked``)
        self._chain_asked: set[str] = set()
        # what our tier costs the engine: CPU on its scheduler thread, chunks moved (cpu_report)
        self._engine_thread_cpu_s = 0.0
        self._chunks_stored = self._chunks_loaded = 0
        self._process_cpu_at_start = process_cpu_seconds()
        self._next_cpu_log = time.monotonic() + CPU_LOG_INTERVAL_S
        self._lookup_pool: ThreadPoolExecutor | None = None
        # (chunks, row bytes) numpy view of the primary region: row slices without copies
        self._primary_rows: np.ndarray = np.asarray(primary_kv_view)
        # exclusive_when_full: vLLM's CPU tier as we see it, the chunks left only there, their copies
        self._shadow: CpuTierShadow[OffloadKey] = CpuTierShadow(max(1, self._primary_rows.shape[0]))
        self._deferred: dict[OffloadKey, _Deferred] = {}
        # chunks both here and in the CPU tier: a full tier may give up their copies here
        self._copies: dict[OffloadKey, _Deferred] = {}
        self._demotions: dict[int, list[OffloadKey]] = {}
        self._demote_margin = max(1, int(self._shadow.rows * DEMOTE_MARGIN_SHARE))
        self._exclusive = False
        # demotions_refused: not stored, because the full tier declined it (keep_prefixes, the policy)
        # or its row had changed (the cache's unstable_skipped counts those)
        # given_up: copies here dropped for a demotion (the CPU tier still held them; they are deferred)
        self.exclusive_counts = {"deferred": 0, "demoted": 0, "demotions_lost": 0, "demotions_refused": 0,
                                 "given_up": 0}
        # KV events for vLLM's take_events: None (nothing collected, nothing done per chunk) unless
        # both this entry and vLLM's global KV events ask for them, vLLM's fs tier's rule
        self._events: deque[OffloadingEvent] | None = None
        self.events_dropped = 0
        # keys our tiers removed (told on their threads by the cache's removal listener)
        self._removed: list[BlockKey] = []
        self._removed_lock = threading.Lock()
        self.removals_dropped = 0
        if enable_kv_events:
            if getattr(getattr(offloading_spec, "kv_events_config", None), "enable_kv_cache_events", False):
                self._events = deque()
            else:
                log.warning("lifeboatcache: enable_kv_events is set on secondary tier '%s' but vLLM's KV "
                            "cache events are off; the tier emits no events", tier_type)
        source = config if config is not None else offloading_spec.extra_config.get(EXTRA_KEY)
        try:
            self.cache = open_for_engine(
                lambda: self._open(offloading_spec, source, locality, unknown), on_error=lambda: on_error_of(source),
                texts=self._give_up, namespace=lambda: self.namespace,
                ready=lambda cache: log.info("lifeboatcache tier ready: namespace %s, tiers %s, %d-byte chunks",
                                             self.namespace.id, [t.name for t in cache.tiers], self._payload_bytes))
        except LifeboatTierError as exc:
            raise _typed(exc) from exc.__cause__
        if self.cache is not None and self._events is not None:
            self.cache.listen_removed(self.namespace.id, self._on_removed)

    # ------------------------------------------------------------------ set-up

    def _open(self, offloading_spec: Any, source: Any, locality: str | None, unknown: dict[str, Any]) -> LifeboatConfig:
        """The engine-side set-up (entry keys, namespace, chunk geometry); returns our config."""
        if unknown:
            raise TypeError(f"unknown keys {sorted(unknown)} in its secondary_tiers entry; valid extra keys: "
                            "config, locality, enable_kv_events")
        # as vLLM's fs tier: the enum's value exactly ("local" and "" are errors), none when not given
        self.locality = Locality(locality) if locality is not None else None
        config = resolve_config(source)
        self.namespace = getattr(offloading_spec, "lifeboat_namespace", None) or namespace_for(
            offloading_spec.config, offloading_spec.blocks_per_chunk, "unknown",
            getattr(offloading_spec, "replicated_layout", False))
        self._payload_bytes = self._chunk_payload_bytes(offloading_spec)
        # tokens behind one key of each KV group (vLLM's key ends in its group index): groups of a
        # hybrid model may have different block sizes, so their chunks cover different spans
        bpc = int(offloading_spec.blocks_per_chunk)
        self._group_chunk_tokens = {i.to_bytes(4, "big"): g.tokens_per_block * bpc
                                    for i, g in enumerate(offloading_spec.config.groups)}
        self._chunk_tokens = max(self._group_chunk_tokens.values())
        self._layout = self._chunk_layout(offloading_spec, self.namespace)
        ours = vllm_settings(config)
        self._exclusive = ours.exclusive_when_full
        self._defer_promotions = ours.defer_promotions
        # at least one row when the budget is on: a tiny CPU tier must not silently turn it off
        budget = ours.promotion_budget
        self._promotion_rows = max(1, int(self._primary_rows.shape[0] * budget)) if budget else 0
        return config

    #: what the tier says when it cannot start (lifeboatcache_core.engine.open_for_engine)
    _give_up: ClassVar[EngineTexts] = EngineTexts(
        log=log, error=LifeboatTierError,
        refuse="lifeboatcache tier cannot start: {exc}. vLLM refuses to start because engine.on_error = "
               "'fail'; fix the config or set engine.on_error = 'serve' to run without the tier",
        serve="lifeboatcache tier disabled, vLLM serves without it: %s (engine.on_error = 'serve'; "
              "set 'fail' to refuse to start instead)")

    @staticmethod
    def _chunk_payload_bytes(spec: Any) -> int:
        """Bytes of KV in one primary row (the row is padded to 4 KiB; padding is not stored)."""
        copies = 1 if getattr(spec, "replicated_layout", False) else spec.config.parallel.world_size
        return int(spec.config.worker_kv_bytes_per_block * copies * spec.blocks_per_chunk) or spec.kv_bytes_per_chunk

    def _chunk_layout(self, spec: Any, namespace: Namespace) -> KVLayout | None:
        """(layer, block, page) when one rank and one KV group: enough for dtype-aware codecs."""
        element = _ELEMENT_BYTES.get(namespace.dtype)
        groups = spec.config.groups
        if element is None or spec.config.parallel.world_size != 1 or len(groups) != 1:
            return None
        layers, bpc = len(groups[0].layer_names), spec.blocks_per_chunk
        per_page, rest = divmod(self._payload_bytes, layers * bpc * element)
        if rest or per_page == 0:
            return None
        return KVLayout(namespace.dtype, (layers, bpc, per_page), ("layer", "block", "page"))

    @property
    def enabled(self) -> bool:
        return self.cache is not None

    def _key(self, key: OffloadKey) -> BlockKey:
        return BlockKey(self.namespace.id, bytes(key))

    def _rows(self, chunk_ids: Iterable[int]) -> list[memoryview]:
        rows, size = self._primary_rows, self._payload_bytes
        return [rows[int(c), :size] for c in chunk_ids]

    def _bad_job(self, job: TransferJob) -> bool:
        """A job naming a row the primary region lacks (or not one row per key) fails whole.

        Otherwise its IndexError would raise into vLLM's scheduler; vLLM's own tiers fail
        such a job too (its test_fs_tier ``test_out_of_bounds_block_id_smoke``).
        """
        ids, n = job.chunk_ids, self._primary_rows.shape[0]
        if len(ids) == len(job.keys) and all(0 <= int(c) < n for c in ids):
            return False
        log.error("lifeboatcache: job %s names rows %s of a %d-row primary region for %d keys; failed",
                  job.job_id, list(map(int, ids)), n, len(job.keys))
        return True

    # ------------------------------------------------------------------ lookups

    @on_engine_thread
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        cache = self.cache
        if cache is None:
            return LookupResult.MISS
        if req_context.req_id not in self._chain_asked:
            self._mark_asked(cache, req_context)
        known = cache.presence([self._key(key)])[0]
        if known is not None:
            if known and self._defer_promotions:
                entry = self._asked.setdefault(key, [self._step, 0])
                mine = self._askers.setdefault(req_context.req_id, set())
                if key not in mine:
                    mine.add(key)
                    entry[1] += 1
                if entry[0] == self._step:
                    return LookupResult.RETRY  # HIT from the next step on (see engine.vllm.defer_promotions)
            if known and self._promotion_rows and not self._may_promote(cache, key, req_context):
                return LookupResult.RETRY  # held back until earlier promotions are scheduled
            return self._answer(cache, key, known)
        # Only storage can tell (a restarted tier still indexing, a shared tier another node
        # writes): the existence check runs off the scheduler thread and vLLM asks again.
        future = self._lookups.get(key)
        if future is None:
            if self._lookup_pool is None:
                self._lookup_pool = ThreadPoolExecutor(1, thread_name_prefix="lifeboat-lookup")
            self._lookups[key] = self._lookup_pool.submit(lambda k=self._key(key): cache.exists([k])[0])
            return LookupResult.RETRY
        if not future.done():
            return LookupResult.RETRY
        found = future.result()
        if found and self._promotion_rows and not self._may_promote(cache, key, req_context):
            return LookupResult.RETRY  # the answer is kept for the next ask
        del self._lookups[key]
        return self._answer(cache, key, found)

    def _mark_asked(self, cache: TieredCache, req_context: ReqContext) -> None:
        """vLLM asks for a request's chain for the first time: its session is live, mark the chain used.

        A full tier protects a session's blocks only while they were used more recently than
        sessions take to come back (``keep_prefixes``), counted from the end of the request that
        used them last. A request that then waits in a loaded engine's queue looked idle the whole
        time, and on 2 CPU cores that wait outgrew the learnt limit: live sessions' heads were
        evicted as ended ones' (grid r34b: 100-137 evictions per server; r35, with this mark: none
        while the request that next asked for the block waited).
        Marked once per request, tail first as at its end (the head most recent); not a request
        end, so no return gap is sampled here (``PrefixGuard.used``).
        """
        self._chain_asked.add(req_context.req_id)
        chain = request_chain(req_context)
        if chain:
            cache.touch([self._key(k) for k in reversed(chain)])

    def _may_promote(self, cache: TieredCache, key: OffloadKey, req_context: ReqContext) -> bool:
        """``engine.vllm.promotion_budget``: may vLLM promote this chunk of this request from here now?

        A HIT makes vLLM allocate a row of its CPU tier for the chunk at once, and it scans every
        waiting request in a step: with more promoted than that tier holds, later promotions evict
        earlier ones before their requests are scheduled (each is loaded again, or finds no row:
        a miss, and the rest of its prompt is recomputed). So a request is let through only if
        the chunks it would take from here fit beside those let through for requests not yet
        scheduled; the first one always is, so one request at a time can always proceed. The
        decision for a held-back request stands for the rest of the step (it costs one pass over
        its chain). True counts the chunk (once per request) against the budget until the request
        is scheduled.
        """
        req_id = req_context.req_id
        taken = self._promoting.get(req_id)
        if taken is None:
            if req_id in self._held_back:
                return False
            if self._promoting and self._promoting_total + self._chunks_here_from(cache, key, req_context) \
                    > self._promotion_rows:
                self._held_back.add(req_id)
                self._held_since.setdefault(req_id, time.monotonic())
                self.promotion_counts["held_back"] += 1
                return False
            taken = self._promoting[req_id] = set()
            self.promotion_counts["admitted"] += 1
            since = self._held_since.pop(req_id, None)
            if since is not None:
                waited = time.monotonic() - since
                waits = self.promotion_waits
                waits["requests"] += 1
                waits["total_s"] += waited
                waits["max_s"] = max(waits["max_s"], waited)
        if key not in taken:
            taken.add(key)
            self._promoting_total += 1
        return True

    def _chunks_here_from(self, cache: TieredCache, key: OffloadKey, req_context: ReqContext) -> int:
        """Chunks of the request from ``key`` on (its chain, every KV group) that our tiers hold."""
        positions = key_positions(req_context)
        start = positions.get(key)
        if start is None:
            return 1
        later = [self._key(k) for k, end in positions.items() if end >= start]
        return sum(1 for here in cache.presence(later) if here)

    def _promotions_done(self, req_id: str) -> None:
        """The request was scheduled (its chunks are in device KV) or finished: its budget is free."""
        self._promoting_total -= len(self._promoting.pop(req_id, ()))

    def on_schedule_end(self, context: Any) -> None:
        """A scheduler step ended: chunks first asked for in it are answered from now on, requests
        scheduled in it give back their promotion budget, and held-back requests are decided anew."""
        self._step += 1
        self._held_back.clear()
        for req_id in getattr(context, "new_req_ids", ()):
            self._promotions_done(req_id)
        if len(self._asked) > MAX_DEFERRED_LOOKUPS:  # bound: a dropped chunk's next ask waits a step again
            for key in list(self._asked)[: len(self._asked) // 2]:
                del self._asked[key]

    def _tokens_of(self, key: OffloadKey) -> int:
        """Tokens one chunk of ``key``'s KV group spans."""
        return self._group_chunk_tokens.get(bytes(key)[-4:], self._chunk_tokens)

    def _answer(self, cache: TieredCache, key: OffloadKey, hit: bool) -> LookupResult:
        """A final answer for one chunk, counted in the token hit-rate metrics (every KV group's
        chunks count, as in vLLM's own chunk_queries/chunk_hits: the groups' attention types are
        not known here, see the README's hybrid section)."""
        tokens = self._tokens_of(key)
        cache.record_lookup(tokens, tokens if hit else 0)
        return LookupResult.HIT if hit else LookupResult.MISS

    # ------------------------------------------------------------------ transfers

    @on_engine_thread
    def submit_store(self, job_metadata: TransferJob) -> None:
        keys = list(job_metadata.keys)
        cache = self.cache
        if cache is None or self._bad_job(job_metadata):
            self._ready.append(JobResult(job_metadata.job_id, success=False))
            return
        block_keys = [self._key(k) for k in keys]
        present = cache.exists(block_keys, blocking=False)
        self._placed(keys, job_metadata.chunk_ids)
        req_context = job_metadata.req_context
        todo = [i for i, here in enumerate(present) if not here]
        all_hints = self._hints(keys, req_context) if self._exclusive else None
        if all_hints is not None:  # vLLM pins the rows until this job ends: their digests name these chunks
            self._remember_copies(keys, self._rows(job_metadata.chunk_ids), all_hints)
        if not todo:
            self._ready.append(JobResult(job_metadata.job_id, success=True, transfer_time=0.0, transfer_bytes=0))
            self._demote_coldest()
            return
        rows = self._rows(job_metadata.chunk_ids[i] for i in todo)
        hints = ([all_hints[i] for i in todo] if all_hints is not None
                 else self._hints([keys[i] for i in todo], req_context))
        if self._exclusive and cache.free_bytes() < len(todo) * self._payload_bytes:
            # full: these chunks stay only in vLLM's CPU tier until it is about to drop them
            for i, row, hint in zip(todo, rows, hints, strict=True):
                copy = self._copies.pop(keys[i], None)
                self._deferred[keys[i]] = copy if copy is not None else _Deferred(payload_digest([row]), hint)
            self.exclusive_counts["deferred"] += len(todo)
            self._ready.append(JobResult(job_metadata.job_id, success=True, transfer_time=0.0, transfer_bytes=0))
            self._demote_coldest()
            return
        cache_job = cache.submit_put([block_keys[i] for i in todo], rows, layout=self._layout, hints=hints)
        req_id = req_context.req_id
        self._pending[cache_job] = _Pending(job_metadata.job_id, [keys[i] for i in todo], False,
                                            len(todo) * self._payload_bytes, req_id)
        self._stores_in_flight[req_id] = self._stores_in_flight.get(req_id, 0) + 1

    # ------------------------------------------------------------------ exclusive when full

    def _placed(self, keys: list[OffloadKey], chunk_ids: Iterable[int]) -> None:
        """Chunks now in these CPU-tier rows; a deferred chunk they displace before its copy is lost."""
        if not self._exclusive:  # nothing is ever deferred: the model would go unused
            return
        for key in self._shadow.place(keys, chunk_ids):
            self._copies.pop(key, None)
            deferred = self._deferred.get(key)
            if deferred is not None and not deferred.submitted:
                del self._deferred[key]
                self.exclusive_counts["demotions_lost"] += 1

    def _demote_coldest(self) -> None:
        """Store the deferred chunks among the CPU tier's coldest rows, from those rows, now.

        The rows are no longer pinned for us, so the job copies each one and stores the copy
        only if it still hashes to what the row held when vLLM handed it over.
        """
        cache = self.cache
        if not self._deferred or cache is None:
            return
        cold = self._shadow.coldest(self._demote_margin)
        keys = [k for k in cold if (d := self._deferred.get(k)) is not None and not d.submitted]
        if not keys:
            return
        deferred = [self._deferred[k] for k in keys]
        for d in deferred:
            d.submitted = True
        rows = self._rows(self._shadow.row_of(k) for k in keys)  # type: ignore[misc]
        depths = [d.hint.depth for d in deferred if d.hint is not None and d.hint.depth is not None]
        given_up = self._copies_to_give_up(cache, len(keys), set(cold), min(depths, default=0))
        cache_job = cache.submit_put([self._key(k) for k in keys], rows, layout=self._layout,
                                     hints=[d.hint for d in deferred], digests=[d.digest for d in deferred],
                                     replacing=[self._key(k) for k in given_up])
        self._demotions[cache_job] = keys

    def _copies_to_give_up(self, cache: TieredCache, n: int, cold: set[OffloadKey],
                           depth: int) -> list[OffloadKey]:
        """Up to ``n`` chunks to drop here so that ``n`` demotions fit a full tier; they become deferred.

        A chunk vLLM's CPU tier holds too is worth nothing here until that tier drops it, while
        a demoted one is lost unless stored now. Without this, a full tier would evict for a
        demotion by its own policy, which keeps exactly these chunks (the hottest, the sessions'
        heads: every use in the CPU tier refreshes them here too) and takes a chunk that only it
        holds, or declines the demotion (``keep_prefixes``). Only chunks at least ``depth`` deep
        in their prefix chain (the shallowest demoted one's), deepest first, as ``keep_prefixes``
        ranks them: a session's head stays here too, since agents return in turn and a head
        that went back and forth between the tiers would be lost in a cycle. Never one of the
        CPU tier's coldest rows: that tier is about to drop those, and then their copy here is
        the one left. Among equals the newest, which that tier keeps longest.
        """
        if cache.free_bytes() >= n * self._payload_bytes:
            return []
        eligible: list[tuple[int, OffloadKey]] = []
        for key in self._shadow.newest():
            copy = self._copies.get(key)
            if copy is None or key in cold or key in self._deferred:
                continue
            chunk_depth = copy.hint.depth if copy.hint is not None and copy.hint.depth is not None else depth
            if chunk_depth >= depth:
                eligible.append((chunk_depth, key))
        eligible.sort(key=lambda item: -item[0])  # stable: newest first among equal depths
        out: list[OffloadKey] = []
        for _depth, key in eligible:
            if len(out) == n:
                break
            if not cache.presence([self._key(key)])[0]:  # evicted here meanwhile: nothing to give up
                del self._copies[key]
                continue
            out.append(key)
        for key in out:
            self._deferred[key] = self._copies.pop(key)
        self.exclusive_counts["given_up"] += len(out)
        return out

    def _remember_copies(self, keys: list[OffloadKey], rows: list[memoryview],
                         hints: list[BlockHint | None]) -> None:
        """These chunks sit in CPU-tier rows vLLM pins for the current job: note what each row holds."""
        for key, row, hint in zip(keys, rows, hints, strict=True):
            if key in self._shadow and key not in self._deferred:
                self._copies[key] = _Deferred(payload_digest([row]), hint)

    def _demoted(self, done: CacheJobResult) -> None:
        keys = self._demotions.pop(done.job_id)
        for key, ok in zip(keys, done.ok, strict=True):
            deferred = self._deferred.pop(key, None)
            self.exclusive_counts["demoted" if ok else "demotions_refused"] += 1
            if ok and deferred is not None and key in self._shadow:  # here and in the CPU tier now
                deferred.submitted = False
                self._copies[key] = deferred
        self._chunks_stored += done.count
        self._stored_event(keys, done.ok)

    def _stored_event(self, keys: list[OffloadKey], ok: list[bool]) -> None:
        """One stored event for the chunks of a finished store job that are here now.

        Only at completion (a submitted store may still fail), only the keys that landed (vLLM's
        fs tier reports a job all or nothing; a key we refused or failed is not held, so naming
        it would make an events consumer route requests to a chunk we lack). Bounded: when vLLM
        stops taking events the oldest go, counted in ``events_dropped``.
        """
        events = self._events
        if events is None:
            return
        stored = [k for k, hit in zip(keys, ok, strict=True) if hit]
        if not stored:
            return
        if len(events) >= MAX_PENDING_EVENTS:
            events.popleft()
            self.events_dropped += 1
        events.append(OffloadingEvent(keys=stored, medium=self.medium, removed=False, locality=self.locality))

    def _on_removed(self, keys: list[BlockKey]) -> None:
        """The cache's removal listener (a tier's I/O thread): note the keys, nothing more here.

        Bounded: past ``MAX_PENDING_REMOVALS`` keys waiting for vLLM the rest are counted, not kept.
        """
        with self._removed_lock:
            room = MAX_PENDING_REMOVALS - len(self._removed)
            if len(keys) > room:
                self.removals_dropped += len(keys) - max(0, room)
                keys = keys[:max(0, room)]
            self._removed.extend(keys)

    def take_events(self) -> Iterable[OffloadingEvent]:
        """The KV events since the last call, oldest first (none unless KV events are enabled).

        Stored events first, then one removed event for the chunks a tier removed that the
        cache holds nowhere now (a chunk evicted from one tier may still be in a tier below,
        or stored again since): after these events a consumer's view is the cache's.
        """
        events = self._events
        if events is None:
            return []
        out = list(events)
        events.clear()
        if self._removed:
            with self._removed_lock:
                removed, self._removed = self._removed, []
            cache = self.cache
            held = cache.presence(removed) if cache is not None else [False] * len(removed)
            gone = list(dict.fromkeys(OffloadKey(k.digest) for k, here in zip(removed, held, strict=True)
                                      if here is not True))
            if gone:
                out.append(OffloadingEvent(keys=gone, medium=self.medium, removed=True, locality=self.locality))
        return out

    def _hints(self, keys: list[OffloadKey], req_context: ReqContext) -> list[BlockHint | None]:
        """Each chunk's session and place in its prefix chain, for session-aware policies (EpiCache).

        ``tag``: the request's first chunk. vLLM's request id names one turn, but every turn of
        an agent's session starts with the same chunk, so it names the session as the engine
        sees it (sessions that share their whole first chunk share an episode). ``depth``: the
        chunk's index in the chain; ``parent``: the chunk before it. A request that names its
        session (``kv_transfer_params["lifeboat_session"]``, ``lifeboatcache_vllm.session``) is tagged
        with that name instead, so a router's ``stage``/``release`` hints can use it.
        """
        named = request_session(req_context)
        positions = key_positions(req_context)
        if not positions:
            return [None if named is None else BlockHint(tag=named) for _ in keys]
        at = {(bytes(k)[-4:], p): k for k, p in positions.items()}  # (group, end token) -> key
        hints: list[BlockHint | None] = []
        for key in keys:
            end = positions.get(key)
            if end is None:
                hints.append(None)
                continue
            group, tokens = bytes(key)[-4:], self._tokens_of(key)  # each group's own chunk span
            root, parent = at.get((group, tokens)), at.get((group, end - tokens))
            hints.append(BlockHint(tag=named or (None if root is None else bytes(root)[:16].hex()),
                                   parent=None if parent is None else self._key(parent),
                                   depth=max(0, end // tokens - 1)))
        return hints

    @on_engine_thread
    def submit_load(self, job_metadata: TransferJob) -> None:
        keys = list(job_metadata.keys)
        cache = self.cache
        if cache is None or self._bad_job(job_metadata):
            self._ready.append(JobResult(job_metadata.job_id, success=False, successful_keys=[]))
            return
        cache_job = cache.submit_get_into([self._key(k) for k in keys], self._rows(job_metadata.chunk_ids))
        hints = self._hints(keys, job_metadata.req_context) if self._exclusive else None
        self._pending[cache_job] = _Pending(job_metadata.job_id, keys, True, len(keys) * self._payload_bytes,
                                            hints=hints)
        self._placed(keys, job_metadata.chunk_ids)
        self._demote_coldest()

    def _result(self, done: CacheJobResult) -> JobResult | None:
        if done.job_id in self._demotions:
            self._demoted(done)
            return None
        job = self._pending.pop(done.job_id, None)
        if job is None:
            return None
        if not job.is_load:
            self._store_finished(job.req_id)
        ok = all(done.ok)
        partial = None if ok or not job.is_load else [k for k, hit in zip(job.keys, done.ok, strict=True) if hit]
        if not ok and not job.is_load:
            log.debug("lifeboatcache: %d of %d chunks not stored", done.ok.count(False), len(done.ok))
        moved = done.count * self._payload_bytes
        if job.is_load:
            self._chunks_loaded += done.count
            if self._exclusive and job.hints is not None:  # loaded: here and in the CPU tier, rows pinned
                got = [(k, h) for k, h, hit in zip(job.keys, job.hints, done.ok, strict=True)
                       if hit and k in self._shadow]
                self._remember_copies([k for k, _h in got], self._rows(self._shadow.row_of(k) for k, _h in got),
                                      [h for _k, h in got])
        else:
            self._chunks_stored += done.count
            self._stored_event(job.keys, done.ok)
        # the job's own duration: vLLM's kv_offload_tiering_{read,write}_time then compare with its
        # fs tier, which times a job on its I/O thread; time to this poll adds up to a whole engine step
        return JobResult(job.job_id, success=ok, successful_keys=partial, transfer_time=done.seconds,
                         transfer_bytes=moved)

    @on_engine_thread
    def get_finished_jobs(self) -> Iterable[JobResult]:
        out, self._ready = self._ready, []
        if self.cache is not None and (self._pending or self._demotions):
            # The scheduler loop holds the GIL between steps; every system call of our I/O
            # threads needs it back (up to a 5 ms switch interval each). Releasing it once per
            # poll lets a waiting I/O thread in at once: a 171 MB load went from 60-190 ms to 20-30 ms.
            time.sleep(0)
            for done in self.cache.poll():
                result = self._result(done)
                if result is not None:
                    out.append(result)
            now = time.monotonic()
            if now >= self._next_cpu_log:  # vLLM aborts EngineCore on SIGTERM: shutdown may never log
                self._next_cpu_log = now + CPU_LOG_INTERVAL_S
                log.info("lifeboatcache tier cpu: %s", json.dumps(self.cpu_report()))
        return out

    def has_pending_work(self) -> bool:
        return bool(self._pending or self._ready)

    # ------------------------------------------------------------------ recency

    @on_engine_thread
    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        """vLLM marks chunks used (head to tail); our policy sees them tail first, so the head is newest."""
        if self.cache is not None and keys:
            self.cache.touch([self._key(k) for k in reversed(list(keys))])

    @on_engine_thread
    def on_request_finished(self, req_context: ReqContext) -> None:
        """The request used every chunk of its chain, wherever each hit: refresh their recency here.

        A chunk that keeps hitting in vLLM's CPU tier (or device KV) is never read from ours;
        without this our policy would see the hottest prefixes as the coldest blocks and a full
        tier would evict them first, after which every later chunk of those sessions is
        useless (a prompt hits only up to its first miss). Touched tail first so that a chain's
        head is the most recent and a full tier gives up a session's tail before its head, as
        vLLM's own CPU-tier LRU does. Stores of this request still in flight would land after
        the touch as newest-of-all; the touch then waits for them (``_store_finished``). Marked
        ``request_done``: a policy that learns session rhythms starts the session's idle time here.
        """
        self._forget_asked(req_context.req_id)
        self._chain_asked.discard(req_context.req_id)
        self._promotions_done(req_context.req_id)
        self._held_since.pop(req_context.req_id, None)
        cache = self.cache
        if cache is None:
            return
        keys_tail_first = list(reversed(request_chain(req_context)))
        if not keys_tail_first:
            return
        chain = [self._key(k) for k in keys_tail_first]
        req_id = req_context.req_id
        if self._stores_in_flight.get(req_id):
            self._touch_after[req_id] = chain
        else:
            cache.touch(chain, request_done=True)
        if self._exclusive:
            uses = cpu_tier_uses(req_context)
            self._shadow.use(keys_tail_first if uses is None else reversed(uses))
            self._demote_coldest()  # after the touch: what lands now is newer than the chain

    def _forget_asked(self, req_id: str) -> None:
        """A finished request's deferred chunks: each is deferred again for the next request
        that asks after every request that asked for it is gone, as vLLM's fs tier keeps a
        lookup's answer while a request holds it (``AsyncLookupTier.cleanup``). A request
        that asks again in a later step (not scheduled yet, or its promoted chunk left vLLM's
        CPU tier) gets HIT, not another step's wait."""
        for key in self._askers.pop(req_id, ()):
            entry = self._asked.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._asked[key]

    def _store_finished(self, req_id: str) -> None:
        left = self._stores_in_flight.get(req_id, 0) - 1
        if left > 0:
            self._stores_in_flight[req_id] = left
            return
        self._stores_in_flight.pop(req_id, None)
        chain = self._touch_after.pop(req_id, None)
        if chain and self.cache is not None:
            self.cache.touch(chain, request_done=True)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        if self.cache is None:
            return
        for cache_job in [*self._pending, *self._demotions]:
            try:
                done = self.cache.wait(cache_job)
            except KeyError:  # already finished and polled into another path
                continue
            result = self._result(done)
            if result is not None:
                self._ready.append(result)

    def cpu_report(self) -> dict[str, float]:
        """CPU seconds our tier cost this engine process so far, and per 1,000 chunks moved.

        ``tier_threads_s``: our I/O, manifest and health threads; ``engine_thread_s``: our calls
        on vLLM's scheduler thread (lookups, submits, polls, recency); ``process_s``: the whole
        EngineCore process since the tier started, the engine's own work included.
        ``promotion_wait_*``: requests the promotion budget held back and then let through, their
        total and longest wait in seconds (a request held back waits for those let through before it).
        """
        threads = thread_cpu_seconds()
        moved = self._chunks_stored + self._chunks_loaded
        ours = threads + self._engine_thread_cpu_s
        return {"chunks_stored": self._chunks_stored, "chunks_loaded": self._chunks_loaded,
                **{f"exclusive_{name}": n for name, n in self.exclusive_counts.items()},
                **{f"promotions_{name}": n for name, n in self.promotion_counts.items()},
                **{f"promotion_wait_{name}": round(v, 3) for name, v in self.promotion_waits.items()},
                "kv_events_dropped": self.events_dropped, "kv_removals_dropped": self.removals_dropped,
                "tier_threads_s": round(threads, 3), "engine_thread_s": round(self._engine_thread_cpu_s, 6),
                "ours_per_1000_chunks_s": round(1000 * ours / moved, 3) if moved else 0.0,
                "process_s": round(process_cpu_seconds() - self._process_cpu_at_start, 3)}

    def shutdown(self) -> None:
        if self.cache is None:
            return
        self.drain_jobs()
        # one line a benchmark (``lifeboatcache grid``) or an operator can read after the run
        log.info("lifeboatcache tier cpu: %s", json.dumps(self.cpu_report()))
        if self._lookup_pool is not None:
            self._lookup_pool.shutdown(wait=True, cancel_futures=True)
        self.cache.listen_removed(self.namespace.id, None)
        self.cache.close()
        self.cache = None
        # release our export of the primary view: vLLM closes its mmap right after this
        self._primary_rows = np.empty((0, 0), np.uint8)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-tier counters of the underlying cache (hits, corrupt_blocks, ...)."""
        return self.cache.stats() if self.cache is not None else {}
