"""The local manifest store: one SQLite row per stored block, so a restart can skip scanning.

The ``sqlite:`` :class:`~lifeboatcache_core.abc.ManifestStore` (a file beside the blocks by
default, or the tier's ``manifest_url``), and the table every SQL store shares (the fleet's
``postgresql:`` store in ``lifeboatcache-manifest-postgres`` uses it too). The in-memory index
stays the hot path: puts, deletes and accesses are queued in memory and written in batches by
one background thread, so the manifest costs a dict update per block on the I/O threads.

The files stay the truth (ZODB's rule): a missing, corrupt or stale manifest only costs a
rescan; recovery (:func:`lifeboatcache_core.recovery.recover`) reconciles rows with what is
really stored.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from sqlalchemy import (
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from lifeboatcache_core.abc import ManifestStore, Row
from lifeboatcache_core.errors import ManifestError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.threads import name_os_thread

log = logging.getLogger("lifeboatcache")

metadata = MetaData()
blocks = Table(
    "lifeboat_blocks",
    metadata,
    Column("tier", String(128), primary_key=True),
    Column("namespace", String(64), primary_key=True),
    Column("digest", LargeBinary(64), primary_key=True),
    Column("size", Integer, nullable=False),  # raw bytes
    Column("stored_size", Integer, nullable=False),
    Column("codec", String(64), nullable=False),
    Column("created", Float, nullable=False),
    Column("last_access", Float, nullable=False),
    Column("hits", Integer, nullable=False, default=0),
    Column("tag", String(256), nullable=True),
)

__all__ = ["Manifest", "ManifestError", "Row", "blocks", "first_line", "metadata", "safe_url", "sqlite_url"]


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cur.execute("PRAGMA journal_mode=WAL")  # readers never block the batch writer
    cur.execute("PRAGMA synchronous=NORMAL")  # rows are an accelerator; files are the truth
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


class Manifest(ManifestStore):
    """Rows of one tier in one SQLite database; batched writes on a background thread."""

    def __init__(self, url: str, tier: str, *, flush_interval: float = 0.25, max_batch: int = 20_000) -> None:
        super().__init__(url, tier)
        self.flush_interval = flush_interval
        self.max_batch = max_batch
        self._engine = self._open(url)
        self._lock = threading.Lock()
        self._pending: dict[BlockKey, tuple[int, int, str, float, str | None] | None] = {}
        self._access: dict[BlockKey, list[float]] = {}
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name=f"lifeboat-manifest-{tier}", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, url: str, tier: str) -> Manifest:
        """Open the database; a damaged one is set aside and a new one started (the files are the truth)."""
        try:
            return cls(url, tier)
        except ManifestError as exc:
            if not _set_aside(url):
                raise
            log.warning("tier %s: %s; set aside, starting a new one", tier, exc)
            return cls(url, tier)

    def reset(self) -> Manifest | None:
        """The rows failed while reading: close, set the database aside and start an empty one."""
        try:
            self.close()
        except Exception:
            pass
        if not _set_aside(self.url):
            return None
        try:
            return type(self)(self.url, self.tier)
        except ManifestError as exc:
            log.warning("tier %s: %s; running without a manifest", self.tier, exc)
            return None

    @staticmethod
    def _open(url: str) -> Engine:
        try:
            engine = create_engine(url, pool_pre_ping=True)
            if engine.dialect.name != "sqlite":
                raise ManifestError(f"the sqlite manifest store cannot open a {engine.dialect.name} database")
            event.listen(engine, "connect", _sqlite_pragmas)
            metadata.create_all(engine)
            return engine
        except SQLAlchemyError as exc:
            raise ManifestError(f"manifest {safe_url(url)} cannot be opened: {first_line(exc)}") from exc

    # ------------------------------------------------------------------ reading

    def load(self) -> list[Row]:
        """Every row of this tier, least recently used first (the order a policy wants).

        The one bulk read of a restart: the statement is compiled by SQLAlchemy for this
        dialect but fetched through the DBAPI cursor, as plain tuples. Building a Row per
        block cost more than the query itself for a million blocks.
        """
        stmt = (select(blocks.c.namespace, blocks.c.digest, blocks.c.stored_size)
                .where(blocks.c.tier == self.tier).order_by(blocks.c.last_access))
        compiled = stmt.compile(dialect=self._engine.dialect)
        params = compiled.construct_params()
        if self._engine.dialect.paramstyle in ("qmark", "format", "numeric"):
            args: object = tuple(params[name] for name in compiled.positiontup or ())
        else:
            args = params
        try:
            raw = self._engine.raw_connection()
            try:
                cursor = raw.cursor()
                cursor.execute(str(compiled), args)
                rows = cursor.fetchall()
                cursor.close()
            finally:
                raw.close()
        except (SQLAlchemyError, self._engine.dialect.loaded_dbapi.Error) as exc:
            raise ManifestError(f"manifest {safe_url(self.url)} cannot be read: {first_line(exc)}") from exc
        if rows and not isinstance(rows[0][1], bytes):  # drivers that hand out memoryview
            return [(ns, bytes(d) if isinstance(d, memoryview) else d, n) for ns, d, n in rows]
        return rows

    def lookup(self, key: BlockKey) -> int | None:
        """The stored size of ``key``'s row, queued or written (one query when not queued)."""
        with self._lock:
            if key in self._pending:
                entry = self._pending[key]
                return None if entry is None else entry[1]
        try:
            with self._engine.connect() as conn:
                return conn.execute(select(blocks.c.stored_size).where(
                    and_(blocks.c.tier == self.tier, blocks.c.namespace == key.namespace,
                         blocks.c.digest == key.digest))).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise ManifestError(f"manifest {safe_url(self.url)} cannot be read: {first_line(exc)}") from exc

    def count(self) -> int:
        with self._engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(blocks).where(blocks.c.tier == self.tier))
                       .scalar_one())

    # ------------------------------------------------------------------ queued writes

    def commit_put(self, key: BlockKey, size: int, stored: int, codec: str, tag: str | None,
                   capacity: int | None = None) -> list[BlockKey]:
        """Queue the row (a dict update); the tier's own index enforces the capacity: evicts nothing."""
        with self._lock:
            self._pending[key] = (size, stored, codec, time.time(), tag)
            self._idle.clear()
            backlog = len(self._pending)
        if backlog >= self.max_batch:
            self._wake.set()
        return []

    def record_delete(self, key: BlockKey) -> None:
        with self._lock:
            self._pending[key] = None
            self._access.pop(key, None)
            self._idle.clear()

    def record_access(self, key: BlockKey) -> None:
        now = time.time()
        with self._lock:
            entry = self._access.get(key)
            if entry is None:
                self._access[key] = [1.0, now]
            else:
                entry[0] += 1
                entry[1] = now
            self._idle.clear()

    # ------------------------------------------------------------------ writer thread

    def _run(self) -> None:
        name_os_thread("lifeboat-manif")
        while not self._closed.is_set():
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            self._flush_once()

    def _flush_once(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            access, self._access = self._access, {}
        if not pending and not access:
            self._idle.set()
            return
        try:
            self._write(pending, access)
        except SQLAlchemyError as exc:
            self.write_errors += 1
            log.warning("tier %s: manifest write failed (%d rows kept for retry): %s",
                        self.tier, len(pending), first_line(exc))
            with self._lock:  # keep newer entries; retry on the next round
                for key, value in pending.items():
                    self._pending.setdefault(key, value)
            time.sleep(min(5.0, self.flush_interval * 4))
            return
        with self._lock:
            if not self._pending and not self._access:
                self._idle.set()

    def _write(self, pending: dict[BlockKey, tuple[int, int, str, float, str | None] | None],
               access: dict[BlockKey, list[float]]) -> None:
        gone = [k for k, v in pending.items() if v is None]
        puts = [(k, v) for k, v in pending.items() if v is not None]
        with self._engine.begin() as conn:
            if gone or puts:  # a put replaces its row: delete then insert is portable
                conn.execute(
                    delete(blocks).where(and_(blocks.c.tier == self.tier, blocks.c.namespace == bindparam("ns"),
                                              blocks.c.digest == bindparam("dg"))),
                    [{"ns": k.namespace, "dg": k.digest} for k in [*gone, *(k for k, _ in puts)]],
                )
            if puts:
                conn.execute(blocks.insert(), [
                    dict(tier=self.tier, namespace=k.namespace, digest=k.digest, size=size, stored_size=stored,
                         codec=codec, created=created, last_access=created, hits=0, tag=tag)
                    for k, (size, stored, codec, created, tag) in puts
                ])
            if access:
                conn.execute(
                    update(blocks)
                    .where(and_(blocks.c.tier == self.tier, blocks.c.namespace == bindparam("ns"),
                                blocks.c.digest == bindparam("dg")))
                    .values(hits=blocks.c.hits + bindparam("n"), last_access=bindparam("t")),
                    [{"ns": k.namespace, "dg": k.digest, "n": int(n), "t": t} for k, (n, t) in access.items()],
                )

    def flush(self, timeout: float = 30.0) -> bool:
        """Write everything queued so far; return whether the queue drained in time."""
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self.flush()
        self._closed.set()
        self._wake.set()
        self._thread.join(10)
        self._engine.dispose()


def first_line(exc: BaseException) -> str:
    """The first line of a database error: SQLAlchemy appends the statement and a link."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def safe_url(url: str) -> str:
    """The URL without a password, for logs and health reasons."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<manifest url>"


def _set_aside(url: str) -> bool:
    """Move a damaged SQLite database (and its WAL files) aside; False when there is none to move."""
    if not url.startswith("sqlite:///"):
        return False
    path = Path(url.removeprefix("sqlite:///"))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        part = Path(f"{path}{suffix}")
        if part.exists():
            try:
                part.rename(f"{path}.corrupt-{stamp}{suffix}")
            except OSError:
                return False
    return True
