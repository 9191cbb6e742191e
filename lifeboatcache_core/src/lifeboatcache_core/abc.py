"""The plugin interfaces: Backend, ManifestStore, Codec, EvictionPolicy, EngineAdapter.

A plugin package implements one of these classes and registers it by import string through
the hooks in :mod:`lifeboatcache_core.hookspecs`. The contract tests in
:mod:`lifeboatcache_core.testing` check every implementation the same way.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.keys import BlockKey

T = TypeVar("T")


class PluginConfig(BaseModel):
    """Base of every plugin's config model: unknown keys are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------- backends

#: the failures a Backend documents (absent, failed verification, I/O); a bulk call reports
#: them per key. Anything else is a bug and propagates, as it would from the single call.
BLOCK_ERRORS: tuple[type[Exception], ...] = (KeyError, CorruptBlockError, OSError)

#: one key's outcome in a bulk call: what the single call returned, or the error it raised
Outcome = T | Exception


def outcome_of(call: Callable[..., T], *args: Any) -> Outcome[T]:
    """Run one single-block call for a bulk method: its result, or the documented error it raised.

    Returning the error instead of raising it is what keeps one missing or failing block from
    hiding the outcome of the others in the same bulk call.
    """
    try:
        return call(*args)
    except BLOCK_ERRORS as exc:
        return exc


def read_items(keys: Sequence[BlockKey],
               dests: Sequence[memoryview | None] | None) -> list[tuple[BlockKey, memoryview | None]]:
    """The ``read`` arguments of a ``read_many`` call, one pair per key (``dests`` checked for length)."""
    if dests is None:
        return [(k, None) for k in keys]
    if len(dests) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(dests)} destination buffers")
    return list(zip(keys, dests, strict=True))


def payload_items(keys: Sequence[BlockKey], sinks: Sequence[PayloadSink],
                  stored_sizes: Sequence[int | None]) -> list[tuple[BlockKey, PayloadSink, int | None]]:
    """The ``read_payload`` arguments of a ``read_payload_many`` call, one triple per key (lengths checked)."""
    if not len(keys) == len(sinks) == len(stored_sizes):
        raise ValueError(f"{len(keys)} keys, {len(sinks)} sinks and {len(stored_sizes)} stored sizes")
    return list(zip(keys, sinks, stored_sizes, strict=True))


class PayloadSink(Protocol):
    """Takes a block's payload from ``Backend.read_payload`` (the tier's decoder, ``Tier.fetch``).

    Views passed in are valid only during the call. A sink refuses a payload by raising
    CorruptBlockError (or a subclass), so that a bulk read reports it for that key alone. A
    payload fed in prefixes is decoded from bytes whose hash is not checked yet: whatever
    ``feed`` wrote is the caller's to discard if ``read_payload`` then raises (the tier serves
    such a block as a miss, as any other).
    """

    def begin(self, meta: BlockMeta, payload_len: int) -> bool:
        """The block's header, checked; True to be fed the payload's prefixes as they arrive."""

    def feed(self, prefix: memoryview) -> None:
        """The payload's first bytes read so far (a longer prefix of the same payload each call)."""

    def end(self, payload: memoryview) -> None:
        """The whole payload, its hash checked."""


class Backend(ABC):
    """Stores self-describing blocks (DESIGN §5) under keys.

    Backends are called from the tier's I/O threads, concurrently; implementations must be
    thread-safe for distinct keys and must tolerate two writers of one key (last rename
    wins, both blocks valid). Integrity failures raise ``CorruptBlockError``; I/O failures
    raise ``OSError``; an absent block raises ``KeyError``. The tier turns all three into
    misses, so a backend never needs to swallow errors itself.
    """

    #: survives a process restart (the fallback rule in DESIGN §6 counts these)
    persistent: ClassVar[bool] = True
    #: blocks read or written on several threads at once move faster than on one: a store that
    #: waits (a disk, a network). False where a read or write is a memory copy under the GIL
    #: (the DRAM tier): the cache then runs a job's uncoded blocks here as one task, since
    #: splitting them buys no overlap, only thread hand-offs and a heavier latency tail
    parallel_io: ClassVar[bool] = True
    config_model: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig, *, tier: str) -> None:
        self.config = config
        self.tier = tier

    @abstractmethod
    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        """Store ``payload`` (pieces, concatenated) atomically; return the bytes stored.

        The pieces are lent for the call: keep no reference to them after it (a tier encodes
        its next block into the same memory)."""

    def put_stream(self, key: BlockKey, encoder: StreamEncoder,
                   finish: Callable[[Sequence[Buffer], dict[str, Any]], BlockMeta | None]) -> int | None:
        """Store the payload ``encoder`` codes, as ``put`` does; ``finish(pieces, params)`` gives
        the block's meta once the payload is whole, or None to store nothing (then None here).

        Why: a backend that writes a block in pieces (``O_DIRECT``) can write what is coded while
        the rest is being coded, so the disk is busy while the CPU codes. This default codes the
        whole payload first, then ``put``.
        """
        while not encoder.finished:
            encoder.step(sys.maxsize)
        pieces, params = encoder.result()
        meta = finish(pieces, params)
        return None if meta is None else self.put(key, pieces, meta)

    @abstractmethod
    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        """Return the verified meta and payload of ``key``.

        When ``dest`` is given and is exactly the payload's length, the payload is read into
        ``dest`` (copy-free) and the returned view is ``dest``; otherwise a new buffer is used.
        """

    def read_payload(self, key: BlockKey, sink: PayloadSink,
                     stored_size: int | None = None) -> tuple[BlockMeta, int]:
        """Hand the payload of ``key`` to ``sink``: ``begin`` with the verified header, then, if it
        asked for them, ``feed`` with the payload's arrived prefixes, then ``end`` with the whole
        payload once its hash is checked; return the meta and the block's stored size (as ``put``
        and ``scan`` count it, where the read tells it; the payload's length otherwise).

        For a payload the caller decodes at once (a coding tier): the views ``sink`` gets may be
        the backend's own scratch memory, valid only during each call, so no buffer is allocated
        or copied per block. ``stored_size`` is the size ``put`` returned for the block, where the
        caller's index knows it (a backend may use it to skip asking the store, and must not
        trust it: a wrong size is not a corrupt block). The default reads the block with ``read``.
        """
        meta, payload = self.read(key)
        sink.begin(meta, payload.nbytes)
        sink.end(payload)
        return meta, payload.nbytes

    @abstractmethod
    def exists(self, key: BlockKey) -> bool:
        """Cheap presence check (no verification)."""

    @abstractmethod
    def delete(self, key: BlockKey) -> int:
        """Remove ``key``; return the bytes freed (0 when absent)."""

    @abstractmethod
    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        """Every stored key with its stored size, for rebuilding the index."""

    # Bulk calls (zarr's Store.get_many/set_many style): item i of the result is the outcome of
    # the single call for item i, in order, each reported on its own. The defaults loop over the
    # single calls; stores that pay a round trip per request (S3, HTTP) override them to run the
    # requests concurrently, which the tier then gets without changing.

    def read_many(self, keys: Sequence[BlockKey],
                  dests: Sequence[memoryview | None] | None = None) -> list[Outcome[tuple[BlockMeta, memoryview]]]:
        """``read(keys[i], dests[i])`` for every key: the meta and payload, or the error it raised."""
        return [outcome_of(self.read, k, dest) for k, dest in read_items(keys, dests)]

    def read_payload_many(self, keys: Sequence[BlockKey], sinks: Sequence[PayloadSink],
                          stored_sizes: Sequence[int | None]) -> list[Outcome[tuple[BlockMeta, int]]]:
        """``read_payload(keys[i], sinks[i], stored_sizes[i])`` for every key: what it returned, or the
        error it raised (a sink's own refusals are CorruptBlockErrors, reported the same way)."""
        return [outcome_of(self.read_payload, *item) for item in payload_items(keys, sinks, stored_sizes)]

    def write_many(self, items: Sequence[tuple[BlockKey, Sequence[Buffer], BlockMeta]]) -> list[Outcome[int]]:
        """``put(key, payload, meta)`` for every item: the bytes stored, or the error it raised."""
        return [outcome_of(self.put, k, payload, meta) for k, payload, meta in items]

    def delete_many(self, keys: Sequence[BlockKey]) -> list[Exception | None]:
        """Remove every key: None where the block is gone (deleted, or was absent), else the error.

        Unlike ``delete`` it reports no sizes: the caller's index knows them, and a store that
        would need an extra request per key to learn them (S3's HEAD) can skip it.
        """
        outcomes = [outcome_of(self.delete, k) for k in keys]
        return [o if isinstance(o, Exception) else None for o in outcomes]

    def list_keys(self) -> Iterator[BlockKey]:
        """Every stored key, as cheaply as the store allows (names only: recovery reconciles
        millions of keys against the manifest with this)."""
        for key, _size in self.scan():
            yield key

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        """The verified meta of ``key`` and its stored size, reading as little as possible.

        Recovery uses it for blocks the manifest does not know; the default reads the block.
        """
        meta, payload = self.read(key)
        return meta, payload.nbytes

    def default_manifest_url(self) -> str | None:
        """Where this backend keeps its manifest unless the tier sets ``manifest_url``."""
        return None

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        """Keep a namespace's description (model, dtype, layout) beside its blocks for operators.

        Called once per namespace an engine registers, on every up tier; raise ``OSError`` when
        it cannot be written. The default keeps nothing: the blocks do not need it.
        """

    def quarantine(self, key: BlockKey, reason: str) -> None:
        """Set a damaged block aside (default: delete it)."""
        self.delete(key)

    def probe(self) -> None:
        """Write, read back and delete a probe block; raise ``TierUnavailableError``."""

    def free_bytes(self) -> int | None:
        """Free space on the underlying store, if it has such a notion."""
        return None

    def close(self) -> None:
        """Release resources; the default has none."""


# ----------------------------------------------------------------------------- manifest stores

#: a manifest row as ``load`` returns it: namespace, digest, stored bytes (unchecked: a
#: database is input, recovery validates each row before indexing it)
Row = tuple[str, bytes, int]


class ManifestStore(ABC):
    """One tier's index rows in a database, so a restart need not scan the blocks (DESIGN §5).

    Selected by the scheme of the tier's ``manifest_url`` (``sqlite:`` beside the blocks by
    default, ``postgresql:`` for a fleet) through ``register.manifest(scheme, ...)``. The tier
    calls every method outside its lock except ``record_delete``, which is called under it
    (ordered with the put it undoes) and must therefore never wait for I/O. Failures raise
    ``ManifestError``.

    A *local* store (``shared = False``) is an accelerator: writes may be queued, the block
    files stay the truth and recovery reconciles the rows with them. A *shared* store is the
    truth of a tier several nodes write: ``commit_put`` publishes synchronously (a block is
    not stored until its row is), an unindexed key may still be another node's (``lookup``),
    and the store owns the tier's capacity fleet-wide. A tier cannot work without it.
    """

    #: rows written by other nodes too; the rows are the truth and hold the capacity budget
    shared: ClassVar[bool] = False

    def __init__(self, url: str, tier: str) -> None:
        self.url = url
        self.tier = tier
        #: failed writes so far (kept and retried by a queued store), shown in the tier's health
        self.write_errors = 0

    @classmethod
    def open(cls, url: str, tier: str) -> ManifestStore:
        """Open (creating if needed) the rows of ``tier`` at ``url``; raise ``ManifestError``."""
        return cls(url, tier)

    @abstractmethod
    def load(self) -> list[Row]:
        """Every row of the tier, least recently used first (the order a policy wants)."""

    @abstractmethod
    def commit_put(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None,
                   capacity: int | None = None) -> list[BlockKey]:
        """Record a block that is now stored; return the keys the store evicted to fit it.

        Called after the block is complete and before the tier indexes it. A shared store
        evicts its least recently used rows down to ``capacity`` (stored bytes) in the same
        step and returns their keys: the tier then deletes those blocks, after this call, so
        no database lock is held across storage I/O. A local store evicts nothing.
        """

    @abstractmethod
    def record_delete(self, key: BlockKey) -> None:
        """The block is gone (evicted, missing, set aside): drop its row. Never waits for I/O."""

    @abstractmethod
    def record_access(self, key: BlockKey) -> None:
        """The block was read: note it for the recency order a restart (or the fleet) sees."""

    @abstractmethod
    def lookup(self, key: BlockKey) -> int | None:
        """The stored size in ``key``'s row, or None without one (a shared tier's unindexed keys)."""

    def ping(self) -> None:
        """Raise ``ManifestError`` when the database does not answer (the tier's periodic probe).

        The default checks nothing: a local store's failed writes are kept and retried.
        """

    def reset(self) -> ManifestStore | None:
        """The rows could not be read: a fresh, empty store to rebuild from the blocks, or None.

        The default has no way to start over (the tier runs without rows, restarts rescan).
        """
        return None

    def flush(self, timeout: float = 30.0) -> bool:
        """Write everything queued so far; return whether it drained in time (default: nothing queued)."""
        return True

    def close(self) -> None:
        """Write what is queued and release the database."""


# ----------------------------------------------------------------------------- codecs


@dataclass(frozen=True, slots=True)
class KVLayout:
    """What the bytes of a block are: dtype name and shape, with a name per axis.

    Axis names come from {"kv", "layer", "token", "head", "dim", "block", "page"}; codecs find
    the axes they care about (e.g. K per channel needs "kv" and "dim") by name. dtype names
    follow torch ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "uint8").
    """

    dtype: str
    shape: tuple[int, ...]
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.axes):
            raise ValueError(f"shape {self.shape} and axes {self.axes} differ in length")


class StreamDecoder(Protocol):
    """Decodes one payload into one ``dest`` from its prefixes as they arrive (``Codec.stream_decoder``)."""

    def feed(self, prefix: memoryview) -> None:
        """Decode what ``prefix`` (the payload's first bytes so far, longer each call) holds whole."""

    def finish(self, payload: memoryview) -> None:
        """Decode the rest of the whole ``payload``; raise ``CorruptBlockError`` if it does not decode."""


class StreamEncoder(Protocol):
    """Codes one block into one buffer in steps (``Codec.stream_encoder``): the payload's bytes
    from ``head_len`` on are final once coded, so a backend can write them while the rest is
    coded; the first ``head_len`` change until the last step (a piece table, say)."""

    #: where the payload goes (page-aligned): the payload is ``out[:length]`` once finished
    out: memoryview
    head_len: int
    #: every step taken: ``result`` is ready
    finished: bool
    #: the payload's length in ``out`` once finished; None when the block is stored otherwise
    #: (coding did not pay: ``result`` then names other pieces)
    length: int | None

    def step(self, stop: int) -> int:
        """Code on until the payload has at least ``stop`` bytes or is whole; the bytes coded so far."""

    def result(self) -> tuple[Sequence[Buffer], dict[str, Any]]:
        """Once finished: the payload's pieces and the params to record, as ``Codec.encode`` returns them."""


class Codec(ABC):
    """Turns raw block bytes into stored bytes and back, per tier.

    ``decode`` writes the original bytes into ``dest`` (the caller's buffer) and raises
    ``CorruptBlockError`` for a payload it cannot trust (truncated, other version, ...).
    """

    name: ClassVar[str]
    #: the format new blocks are written in, recorded as ``name@version``: a change an older
    #: process cannot read needs a new one, so that such a process keeps the block as
    #: incompatible (a miss) instead of setting it aside as corrupt
    version: ClassVar[int] = 1
    #: older versions whose blocks ``decode`` still reads (their params say which format); a tier
    #: decodes them with its own codec, configured as it is
    reads_versions: ClassVar[tuple[int, ...]] = ()
    lossless: ClassVar[bool] = True
    #: stored bytes are the raw bytes: the tier then reads a block straight into the caller's buffer
    identity: ClassVar[bool] = False
    config_model: ClassVar[type[PluginConfig]] = PluginConfig

    def __init__(self, config: PluginConfig | None = None) -> None:
        self.config = config if config is not None else self.config_model()

    @property
    def tag(self) -> str:
        """``name@version`` as recorded in block meta."""
        return f"{self.name}@{self.version}"

    @abstractmethod
    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        """Return (payload pieces, params to record in the block's meta)."""

    def encode_into(self, raw: memoryview, layout: KVLayout | None,
                    out: memoryview) -> tuple[Sequence[Buffer], dict[str, Any]]:
        """``encode``, with ``out`` (page-aligned, ``raw.nbytes`` long, owned by the caller) to
        put the payload in: pieces may then be views of ``out``, valid until the caller reuses it.

        Why: a tier stores one block per I/O thread at a time, so one such buffer per thread
        serves every store; a payload in fresh memory costs a page fault per 4 KiB written, and
        one that is not page-aligned a copy before an ``O_DIRECT`` write. The default ignores
        ``out``.
        """
        return self.encode(raw, layout)

    def stream_encoder(self, raw: memoryview, layout: KVLayout | None, out: memoryview) -> StreamEncoder | None:
        """An encoder that codes ``raw`` into ``out`` (as ``encode_into``) in steps, so that a
        backend writes the settled bytes while the rest is coded; None, the default, when this
        codec codes only whole (``encode_into``)."""
        return None

    @abstractmethod
    def decode(
        self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None, dest: memoryview
    ) -> None:
        """Write the decoded bytes (``len(dest)`` of them) into ``dest``."""

    def stream_decoder(self, params: dict[str, Any], layout: KVLayout | None, dest: memoryview,
                       payload_len: int) -> StreamDecoder | None:
        """A decoder that takes the payload in order as it is read, so that decoding overlaps the
        read of what follows (a backend that reads a block in ranges feeds it each); None, the
        default, when this payload decodes only whole (``decode``)."""
        return None

    def error_bound(self, layout: KVLayout | None) -> float:
        """Largest relative error (``|x - x'|`` / max ``|x|`` per group) this codec promises."""
        return 0.0


# ----------------------------------------------------------------------------- policies


@dataclass(frozen=True, slots=True)
class BlockHint:
    """What an adapter knows about a block beyond its key, for smarter eviction.

    ``tag`` names the session/episode, ``parent`` is the previous block of the same prefix
    chain and ``depth`` the block's index in its chain (0 = first block of a prompt).
    """

    tag: str | None = None
    parent: BlockKey | None = None
    depth: int | None = None


class EvictionPolicy(ABC):
    """Chooses which block leaves a full tier. Called under the tier's lock: keep it O(1)/O(log n).

    The tier owns sizes and capacity; the policy only orders keys. ``victim`` proposes a key
    without removing it; the tier then calls ``remove`` once the block is gone.
    """

    name: ClassVar[str]
    config_model: ClassVar[type[PluginConfig]] = PluginConfig
    #: where a policy that reasons about time reads it (None: it does not, or counts operations).
    #: Whoever calls the policy may point it elsewhere: a tier at the time each use happened, for
    #: uses it applies later (``Tier.touch``), a simulation at its replay clock. Read it for every
    #: "now"; never keep its value across calls.
    clock: Callable[[], float] | None = None

    def __init__(self, config: PluginConfig | None = None, *, seed: int = 0) -> None:
        self.config = config if config is not None else self.config_model()
        self.seed = seed

    def admit(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> bool:
        """Whether a block the tier does not hold should be stored at all (default: always).

        Asked under the tier's lock before every store of a new key (not for a key already
        held, which is a ``touch``), before any victim is chosen for it. False bypasses the
        store: nothing is evicted for it and ``insert`` is not called, as in Bélády's MIN with
        bypass, where a block needed later than everything it would displace is not cached.
        ``size`` is the raw size (before the codec). A policy that bypasses should do so only
        when it has seen the tier full (``victim`` asked), since free room costs nothing.
        """
        return True

    @abstractmethod
    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        """A block was stored (or re-stored)."""

    @abstractmethod
    def touch(self, key: BlockKey) -> None:
        """A stored block was read."""

    def request_done(self, key: BlockKey) -> None:
        """A request that used the stored block ``key`` has finished (its response ended); a use.

        Engines that report finished requests (vLLM's ``on_request_finished``) touch the
        request's whole chain this way, tail first. The difference from ``touch`` matters to a
        policy that learns when sessions come back: an agent's next request follows the *end* of
        its response by a tool call or a user's reply, so its idle time starts here, and the
        time since the request began (its generation) is not a gap between visits. Default:
        ``touch``.
        """
        self.touch(key)

    @abstractmethod
    def remove(self, key: BlockKey) -> None:
        """A block left the tier (evicted, deleted or found corrupt). Unknown keys are ignored."""

    @abstractmethod
    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        """The block to evict next (``None`` when empty)."""

    def expect(self, key: BlockKey) -> None:
        """A stager expects ``key`` to be read soon (its session's return is near); not a read.

        A staged block enters the tier by ``insert``, as recent as any new block; one a stager
        finds already here is reported by this call instead, so that the blocks a returning
        session will read do not stay the oldest ones and leave to the next stores before it
        arrives. Default: nothing (a policy that learns from reads, EpiCache's return gaps,
        must not count this as one).
        """

    def abandoned(self, key: BlockKey) -> bool:
        """Whether the policy knows that ``key``'s session has left it (default: never).

        A tier with ``keep_prefixes`` declines a new block rather than evict a shallower block
        used lately, a head in use. A block its session's latest request did not use, though
        it used blocks as deep (EpiCache's ``stale_first``: a compacted or rewritten context),
        or one of a session the policy knows to be gone (EpiCache: past its own rhythm's
        deadline, sooner than the guard's one idle limit for all sessions) is no head in use:
        the tier takes it as a victim whatever its depth and age.
        """
        return False

    def victims(self, incoming: BlockKey | None, limit: int) -> list[BlockKey]:
        """Up to ``limit`` blocks in the order the policy would evict them now, state unchanged.

        For a store that may not take every victim (a stager's, which keeps the blocks of
        sessions expected back sooner): it takes the first of these it may, a block the policy
        gives up within its next few picks, instead of giving up its room at the first refusal.
        The default offers only ``victim``; an order that is cheap to read ahead (LRU's) should
        be offered in full up to ``limit``.
        """
        first = self.victim(incoming)
        return [] if first is None else [first]

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...


# ----------------------------------------------------------------------------- adapters


def release_tuple(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of an engine's version string: ``"0.32.0+cpu"`` → ``(0, 32, 0)``.

    Local and pre-release suffixes are ignored: adapters compare releases, and engines ship
    builds such as ``+cpu`` or ``rc1`` that a strict parser would reject.
    """
    parts = [int("".join(ch for ch in piece if ch.isdigit()) or 0) for piece in version.split("+")[0].split(".")[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def require_release(distribution: str, display: str, minimum: tuple[int, ...], requirement: str,
                    install: str, why: str, lookup: Callable[[str], str] | None = None) -> str:
    """The installed version of an engine, or ``PluginLoadError`` saying how to get a usable one.

    ``why`` names the engine feature the adapter relies on (what an older release lacks);
    ``lookup`` defaults to ``importlib.metadata.version``.
    """
    from importlib.metadata import PackageNotFoundError, version

    from lifeboatcache_core.errors import PluginLoadError

    try:
        found = (lookup or version)(distribution)
    except PackageNotFoundError:
        raise PluginLoadError(f"{display} is not installed; install it with: {install} ({requirement})") from None
    if release_tuple(found) < minimum:
        raise PluginLoadError(f"{display} {found} is too old for lifeboatcache (needs {requirement}: {why}); "
                              f"upgrade with: pip install -U '{requirement}'")
    return found


class EngineAdapter(ABC):
    """Connects one inference engine to a TieredCache.

    Adapters import their engine lazily and check its version at load (``check_engine``)
    with a message that says which versions work and how to install one.
    """

    name: ClassVar[str]
    engine: ClassVar[str]
    engine_requirement: ClassVar[str] = ""
    #: the options of its ``[engine.<name>]`` config table (none by default); register it as an
    #: import string too (``register.adapter(..., config=...)``) so checking a config never
    #: imports the adapter, and with it the engine
    config_model: ClassVar[type[PluginConfig]] = PluginConfig

    @classmethod
    @abstractmethod
    def check_engine(cls) -> str:
        """Return the engine's version, or raise ``PluginLoadError`` explaining the mismatch."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "engine": self.engine, "requires": self.engine_requirement}
