"""A manifest shared by a fleet: several nodes, one shared tier (an S3 bucket, an NFS export).

With ``manifest_url = "postgresql+psycopg://..."`` a tier's rows live in one PostgreSQL table
(the ``lifeboat_blocks`` table of :mod:`lifeboatcache_core.manifest`) that every node reads
and writes *synchronously*, so:

- a block one node stores is visible to every node as soon as its put returns: a lookup the
  local index cannot answer asks the manifest, and a hit is adopted into the local index;
- a row is written only after the block itself is complete (an S3 PUT or a renamed file), so
  a node that dies mid-write leaves nothing another node can see;
- capacity is the fleet's: the row insert, the capacity check and the choice and deletion of
  victims (least recently used across the fleet) happen in one transaction under a
  PostgreSQL advisory lock, so one node evicts at a time and the rows never exceed the
  tier's ``capacity_gb``.

Local capacity accounting is switched off for such a tier (the fleet's rows are the budget),
and the per-node batched manifest is replaced by the shared one.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, create_engine, delete, func, select, text, update
from sqlalchemy.exc import SQLAlchemyError

from lifeboatcache_core.abc import BlockHint, KVLayout
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import ManifestError, blocks, metadata
from lifeboatcache_core.tier import Tier

if TYPE_CHECKING:
    from lifeboatcache_core.config import TierConfig
    from lifeboatcache_core.registry import PluginRegistry

log = logging.getLogger("lifeboatcache")

_EVICT_BATCH = 1024
_TOUCH_FLUSH_S = 1.0


def is_fleet_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith("postgresql")


class FleetManifest:
    """One tier's rows in a shared PostgreSQL table; every method is one short transaction."""

    def __init__(self, url: str, tier: str, capacity: int) -> None:
        self.tier = tier
        self.capacity = capacity
        try:
            self.engine = create_engine(url, pool_pre_ping=True)
            if self.engine.dialect.name != "postgresql":
                raise ManifestError(f"a fleet manifest needs PostgreSQL, not {self.engine.dialect.name}")
            _create_table(self.engine)
        except SQLAlchemyError as exc:
            raise ManifestError(f"fleet manifest {_safe(url)} cannot be opened: {_first_line(exc)}") from exc
        digest = hashlib.blake2b(f"lifeboatcache:{tier}".encode(), digest_size=8).digest()
        self._lock_id = int.from_bytes(digest, "big", signed=True)  # one advisory lock per shared tier
        self._touches: dict[BlockKey, float] = {}
        self._touch_lock = threading.Lock()
        self._touched_at = time.monotonic()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(select(1))

    def _row(self, key: BlockKey) -> Any:
        return and_(blocks.c.tier == self.tier, blocks.c.namespace == key.namespace, blocks.c.digest == key.digest)

    def stored_size(self, key: BlockKey) -> int | None:
        with self.engine.connect() as conn:
            return conn.execute(select(blocks.c.stored_size).where(self._row(key))).scalar_one_or_none()

    def load(self) -> list[tuple[BlockKey, int]]:
        """Every row of the tier, least recently used first."""
        stmt = (select(blocks.c.namespace, blocks.c.digest, blocks.c.stored_size)
                .where(blocks.c.tier == self.tier).order_by(blocks.c.last_access))
        with self.engine.connect() as conn:
            return [(BlockKey(ns, bytes(dg)), int(n)) for ns, dg, n in conn.execute(stmt)]

    def used(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(blocks.c.stored_size), 0))
                                    .where(blocks.c.tier == self.tier)).scalar_one())

    def touch(self, key: BlockKey) -> None:
        """Note an access; written in batches (with the next put, or at most every second)."""
        with self._touch_lock:
            self._touches[key] = time.time()
            due = time.monotonic() - self._touched_at > _TOUCH_FLUSH_S
        if due:
            with self.engine.begin() as conn:
                self._flush_touches(conn)

    def _flush_touches(self, conn: Any) -> None:
        with self._touch_lock:
            touches, self._touches = self._touches, {}
            self._touched_at = time.monotonic()
        for key, at in touches.items():
            conn.execute(update(blocks).where(self._row(key))
                         .values(last_access=at, hits=blocks.c.hits + 1))

    def commit_put(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None,
                   evict: Callable[[BlockKey], object]) -> list[BlockKey]:
        """Publish a stored block; make room first by evicting the fleet's LRU blocks.

        Runs under the tier's advisory lock, so the capacity check, the victims' deletion
        (``evict`` deletes the stored block) and the new row are one step fleet-wide. Returns
        the victims. Raises ``SQLAlchemyError``/``OSError``: the block is then not published.
        """
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": self._lock_id})
            self._flush_touches(conn)
            conn.execute(delete(blocks).where(self._row(key)))
            used = int(conn.execute(select(func.coalesce(func.sum(blocks.c.stored_size), 0))
                                    .where(blocks.c.tier == self.tier)).scalar_one())
            victims = self._evict(conn, used + stored - self.capacity, evict) if used + stored > self.capacity else []
            conn.execute(blocks.insert().values(tier=self.tier, namespace=key.namespace, digest=key.digest, size=size,
                                                stored_size=stored, codec=codec, created=now, last_access=now,
                                                hits=0, tag=tag))
        return victims

    def _evict(self, conn: Any, need: int, evict: Callable[[BlockKey], object]) -> list[BlockKey]:
        victims: list[BlockKey] = []
        while need > 0:
            rows = conn.execute(select(blocks.c.namespace, blocks.c.digest, blocks.c.stored_size)
                                .where(blocks.c.tier == self.tier).order_by(blocks.c.last_access)
                                .limit(_EVICT_BATCH)).all()  # rows deleted below drop out of the next batch
            if not rows:
                break
            for ns, digest, stored in rows:
                victim = BlockKey(ns, bytes(digest))
                evict(victim)  # the stored block first: a row never points at nothing for long
                conn.execute(delete(blocks).where(self._row(victim)))
                victims.append(victim)
                need -= int(stored)
                if need <= 0:
                    break
        return victims

    def forget(self, key: BlockKey) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(blocks).where(self._row(key)))

    def close(self) -> None:
        try:
            with self.engine.begin() as conn:
                self._flush_touches(conn)
        except SQLAlchemyError:
            pass
        self.engine.dispose()


class FleetTier(Tier):
    """A tier whose index is shared through a :class:`FleetManifest` (``manifest_url`` = PostgreSQL)."""

    def __init__(self, cfg: TierConfig, registry: PluginRegistry, *, seed: int = 0) -> None:
        super().__init__(cfg, registry, seed=seed)
        self.fleet_capacity = self.capacity
        self.capacity = sys.maxsize  # the fleet's rows are the budget, not this node's index
        self.fleet: FleetManifest | None = None

    def open(self) -> bool:
        """The shared manifest first (without it this node must not write), then the backend."""
        try:
            if self.fleet is None:
                self.fleet = FleetManifest(str(self.cfg.manifest_url), self.name, self.fleet_capacity)
            else:
                self.fleet.ping()
        except ManifestError as exc:
            self.mark_down(str(exc))
            return False
        except SQLAlchemyError as exc:
            self.mark_down(f"fleet manifest unreachable: {_first_line(exc)}")
            return False
        if not super().open():
            return False
        local = getattr(self, "manifest", None)
        if local is not None:  # the shared, synchronous rows replace the per-node batched ones
            local.close()
            self.manifest = None
        return True

    def check(self) -> None:
        """The periodic probe also checks that the shared manifest answers."""
        super().check()
        if self.up and self.fleet is not None:
            try:
                self.fleet.ping()
            except SQLAlchemyError as exc:
                self.mark_down(f"fleet manifest unreachable: {_first_line(exc)}")

    def _open_manifest(self) -> None:
        """No per-node manifest: the fleet manifest is this tier's only index store."""

    def load_index(self) -> None:
        """The index is the fleet's rows: no scan of the shared store is needed."""
        try:
            assert self.fleet is not None
            rows = self.fleet.load()
        except (SQLAlchemyError, AssertionError) as exc:
            log.warning("tier %s: fleet manifest unreadable: %s", self.name, _first_line(exc))
            self._io_error(OSError(f"fleet manifest unreadable: {_first_line(exc)}"))
            self.index_loading = False
            return
        self._adopt_rows(rows)
        self.index_loading = False
        self.index_complete = True
        log.info("tier %s: %d blocks from the fleet manifest", self.name, len(rows))

    def _adopt_rows(self, rows: list[tuple[BlockKey, int]]) -> None:
        with self.lock:
            for key, size in rows:
                if key not in self.index:
                    self.index[key] = size
                    self.used += size
                    self.policy.insert(key, size, None)

    def _in_fleet(self, key: BlockKey) -> bool:
        """Ask the shared manifest about a key this node does not know; adopt it if stored."""
        fleet = self.fleet
        if fleet is None:
            return False
        try:
            size = fleet.stored_size(key)
        except SQLAlchemyError as exc:
            self._io_error(OSError(f"fleet manifest: {_first_line(exc)}"))
            return False
        if size is None:
            return False
        self._adopt_rows([(key, size)])
        return True

    def presence(self, key: BlockKey) -> bool | None:
        """A key this node has not indexed may be in the fleet: unknown (None), not absent.

        So ``may_have`` (called from ``submit_get_into`` on the engine's thread) never runs
        SQL: the fleet is asked by ``fetch`` on the read pool, or by ``has``.
        """
        known = super().presence(key)
        return None if known is False and self.up else known

    def has(self, key: BlockKey) -> bool:
        known = self.presence(key)
        return known if known is not None else self._in_fleet(key)

    def store(self, key: BlockKey, raw: memoryview, layout: KVLayout | None, hint: BlockHint | None) -> bool:
        fleet, backend = self.fleet, self.backend
        if fleet is None or backend is None or not self.up:
            return False
        try:
            if key in self.index and fleet.stored_size(key) is None:  # evicted by another node
                with self.lock:
                    self._forget(key)
        except SQLAlchemyError as exc:
            self._io_error(OSError(f"fleet manifest: {_first_line(exc)}"))
            return False
        if not super().store(key, raw, layout, hint):
            return False
        stored = self.index.get(key, raw.nbytes)
        try:
            victims = fleet.commit_put(key, raw.nbytes, stored, self.codec.tag, hint.tag if hint else None,
                                       evict=backend.delete)
        except (SQLAlchemyError, OSError) as exc:  # not published: keep storage and rows in step
            with self.lock:
                self._forget(key)
            try:
                backend.delete(key)
            except OSError:
                pass
            self._io_error(exc if isinstance(exc, OSError) else OSError(f"fleet manifest: {_first_line(exc)}"))
            return False
        if victims:
            with self.lock:
                for victim in victims:
                    if victim != key:
                        self._forget(victim)
                self.stats.evictions += len(victims)
        return True

    def fetch(self, key: BlockKey, dest: memoryview) -> BlockMeta | None:
        if key not in self.index and not self._in_fleet(key):  # on the read pool, not the caller's thread
            return None
        meta = super().fetch(key, dest)
        fleet = self.fleet
        if meta is not None and fleet is not None:
            try:
                fleet.touch(key)
            except SQLAlchemyError as exc:
                log.debug("tier %s: fleet access time not recorded: %s", self.name, _first_line(exc))
        return meta

    def snapshot(self) -> dict[str, Any]:
        out = super().snapshot()
        out["capacity_bytes"] = self.fleet_capacity
        return out

    def close(self) -> None:
        super().close()
        if self.fleet is not None:
            self.fleet.close()


def tier_class(cfg: TierConfig) -> type[Tier]:
    """``FleetTier`` for a tier whose manifest is a PostgreSQL URL, else ``Tier``."""
    return FleetTier if is_fleet_url(getattr(cfg, "manifest_url", None)) else Tier


def _create_table(engine: Any) -> None:
    """Create the table; two nodes starting at once may race on it, so retry once."""
    try:
        metadata.create_all(engine)
    except SQLAlchemyError:
        time.sleep(0.2)
        metadata.create_all(engine)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<manifest url>"
