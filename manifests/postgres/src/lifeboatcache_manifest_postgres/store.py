"""A manifest store shared by a fleet: several nodes, one shared tier (an S3 bucket, an NFS export).

With ``manifest_url = "postgresql+psycopg://..."`` a tier's rows live in one PostgreSQL table
(the ``lifeboat_blocks`` table of :mod:`lifeboatcache_core.manifest`) that every node reads
and writes *synchronously*, so:

- a block one node stores is visible to every node as soon as its put returns: a lookup the
  local index cannot answer asks the table (``lookup``), and the tier indexes a hit;
- a row is written only after the block itself is complete (an S3 PUT or a renamed file), so
  a node that dies mid-write leaves nothing another node can see;
- capacity is the fleet's: the capacity check, the choice of victims (least recently used
  across the fleet), the deletion of their rows and the new row are one transaction under a
  PostgreSQL advisory lock, so one node evicts at a time and the rows never exceed the
  tier's ``capacity_gb``. The victims' blocks are deleted by the tier *after* the
  transaction: the lock is never held across storage I/O, and a row never names a block
  that is already gone.

Accesses and row deletions are queued in memory (the tier calls ``record_delete`` under its
own lock) and written in batches under the same advisory lock, with the next put or at most
every second: taking the lock orders a queued delete with a later put of the same key.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from lifeboatcache_core.abc import ManifestStore, Row
from lifeboatcache_core.errors import ManifestError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import blocks, first_line, metadata, safe_url
from sqlalchemy import and_, create_engine, delete, func, select, text, update
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("lifeboatcache")

_EVICT_BATCH = 1024
_FLUSH_S = 1.0


class PostgresManifest(ManifestStore):
    """One tier's rows in a shared PostgreSQL table; every method is one short transaction."""

    shared = True

    def __init__(self, url: str, tier: str) -> None:
        super().__init__(url, tier)
        try:
            self.engine = create_engine(url, pool_pre_ping=True)
            if self.engine.dialect.name != "postgresql":
                raise ManifestError(f"a fleet manifest needs PostgreSQL, not {self.engine.dialect.name}")
            _create_table(self.engine)
        except SQLAlchemyError as exc:
            raise ManifestError(f"fleet manifest {safe_url(url)} cannot be opened: {first_line(exc)}") from exc
        digest = hashlib.blake2b(f"lifeboatcache:{tier}".encode(), digest_size=8).digest()
        self._lock_id = int.from_bytes(digest, "big", signed=True)  # one advisory lock per shared tier
        self._queue_lock = threading.Lock()
        self._touches: dict[BlockKey, float] = {}
        self._gone: set[BlockKey] = set()
        self._flushed_at = time.monotonic()

    def _row(self, key: BlockKey) -> Any:
        return and_(blocks.c.tier == self.tier, blocks.c.namespace == key.namespace, blocks.c.digest == key.digest)

    def _failed(self, what: str, exc: SQLAlchemyError) -> ManifestError:
        return ManifestError(f"fleet manifest {what}: {first_line(exc)}")

    def ping(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn.execute(select(1))
        except SQLAlchemyError as exc:
            raise self._failed("unreachable", exc) from exc

    def load(self) -> list[Row]:
        stmt = (select(blocks.c.namespace, blocks.c.digest, blocks.c.stored_size)
                .where(blocks.c.tier == self.tier).order_by(blocks.c.last_access))
        try:
            with self.engine.connect() as conn:
                return [(ns, bytes(dg), n) for ns, dg, n in conn.execute(stmt)]
        except SQLAlchemyError as exc:
            raise self._failed("unreadable", exc) from exc

    def lookup(self, key: BlockKey) -> int | None:
        try:
            with self.engine.connect() as conn:
                return conn.execute(select(blocks.c.stored_size).where(self._row(key))).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise self._failed("unreadable", exc) from exc

    def used(self) -> int:
        """Stored bytes of every row of the tier, all nodes together."""
        with self.engine.connect() as conn:
            return self._used(conn)

    def _used(self, conn: Any) -> int:
        return int(conn.execute(select(func.coalesce(func.sum(blocks.c.stored_size), 0))
                                .where(blocks.c.tier == self.tier)).scalar_one())

    def record_access(self, key: BlockKey) -> None:
        """Queue the access; written with the next put, or here once a second has passed."""
        with self._queue_lock:
            self._touches[key] = time.time()
            due = time.monotonic() - self._flushed_at > _FLUSH_S
        if due:
            try:
                with self.engine.begin() as conn:
                    self._lock(conn)
                    self._flush(conn)
            except SQLAlchemyError as exc:  # recency only: the next flush carries newer times
                self.write_errors += 1
                log.debug("tier %s: fleet access times not recorded: %s", self.tier, first_line(exc))

    def record_delete(self, key: BlockKey) -> None:
        """Queue the row's deletion (no I/O: the tier holds its lock); written with the next flush."""
        with self._queue_lock:
            self._gone.add(key)
            self._touches.pop(key, None)

    def _lock(self, conn: Any) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": self._lock_id})

    def _flush(self, conn: Any) -> None:
        """Write the queued deletions and accesses (the caller holds the advisory lock)."""
        with self._queue_lock:
            touches, self._touches = self._touches, {}
            gone, self._gone = self._gone, set()
            self._flushed_at = time.monotonic()
        for key in gone:
            conn.execute(delete(blocks).where(self._row(key)))
        for key, at in touches.items():
            conn.execute(update(blocks).where(self._row(key)).values(last_access=at, hits=blocks.c.hits + 1))

    def commit_put(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None,
                   capacity: int | None = None) -> list[BlockKey]:
        """Publish a stored block, first removing the rows of the fleet's LRU blocks to fit ``capacity``.

        One transaction under the tier's advisory lock, with no storage I/O in it: the rows
        of the victims are deleted here, their blocks by the tier once this returns. Returns
        the victims. Raises ``ManifestError``: the block is then not published.
        """
        now = time.time()
        try:
            with self.engine.begin() as conn:
                self._lock(conn)
                self._flush(conn)
                conn.execute(delete(blocks).where(self._row(key)))
                need = self._used(conn) + stored - capacity if capacity is not None else 0
                victims = self._evict(conn, need) if need > 0 else []
                conn.execute(blocks.insert().values(tier=self.tier, namespace=key.namespace, digest=key.digest,
                                                    size=size, stored_size=stored, codec=codec, created=now,
                                                    last_access=now, hits=0, tag=tag))
        except SQLAlchemyError as exc:
            raise self._failed("write failed", exc) from exc
        return victims

    def _evict(self, conn: Any, need: int) -> list[BlockKey]:
        victims: list[BlockKey] = []
        while need > 0:
            rows = conn.execute(select(blocks.c.namespace, blocks.c.digest, blocks.c.stored_size)
                                .where(blocks.c.tier == self.tier).order_by(blocks.c.last_access)
                                .limit(_EVICT_BATCH)).all()  # rows deleted below drop out of the next batch
            if not rows:
                break
            for ns, digest, stored in rows:
                victim = BlockKey(ns, bytes(digest))
                conn.execute(delete(blocks).where(self._row(victim)))
                victims.append(victim)
                need -= int(stored)
                if need <= 0:
                    break
        return victims

    def flush(self, timeout: float = 30.0) -> bool:
        """Write the queued deletions and accesses now; False when the database refused them."""
        try:
            with self.engine.begin() as conn:
                self._lock(conn)
                self._flush(conn)
        except SQLAlchemyError as exc:
            self.write_errors += 1
            log.debug("tier %s: fleet manifest flush failed: %s", self.tier, first_line(exc))
            return False
        return True

    def close(self) -> None:
        self.flush()
        self.engine.dispose()


def _create_table(engine: Any) -> None:
    """Create the table; two nodes starting at once may race on it, so retry once."""
    try:
        metadata.create_all(engine)
    except SQLAlchemyError:
        time.sleep(0.2)
        metadata.create_all(engine)
