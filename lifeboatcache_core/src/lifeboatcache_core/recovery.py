"""Restart recovery: rebuild a tier's in-memory index, serving all the while (DESIGN §5-6).

1. Load the manifest (one query) into the index: the tier now answers from memory, and the
   index counts as complete.
2. Reconcile with what is really stored, by name only: blocks the manifest does not know
   (written behind its back, or the manifest is gone/corrupt) are verified by header and
   added; rows whose file is gone are dropped. Files are the truth, except on a tier whose
   manifest store is shared (a fleet's): there the rows are, and a block without one was
   never published, so there is nothing to reconcile.

Until the index is complete, the tier reads the backend directly on an index miss, so the
first hit after a restart does not wait for recovery.

Recovery works over what it is handed: the backend, the manifest store, a progress report and
the index as a :class:`RecoveredIndex` (``Tier`` provides it); it never touches the tier's
lock, dicts or counters itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from lifeboatcache_core.abc import Backend, ManifestStore, Row
from lifeboatcache_core.errors import CorruptBlockError, ManifestError
from lifeboatcache_core.keys import MAX_DIGEST_BYTES, BlockKey, valid_namespace

log = logging.getLogger("lifeboatcache")
_BATCH = 65_536


@dataclass
class RecoveryProgress:
    """Exported as metrics and in ``cache.health()`` while a tier recovers."""

    phase: str = "pending"  # pending | manifest | listing | headers | done | failed
    manifest_rows: int = 0
    manifest_s: float = 0.0  # open -> every manifest row indexed (the index is usable from here)
    listed: int = 0
    added_from_files: int = 0
    missing_files: int = 0
    corrupt: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RecoveredIndex(Protocol):
    """The index recovery fills. Each call is one step under the index's own lock."""

    def indexed(self) -> Container[BlockKey]:
        """Live membership of the index (no copy: a million-key listing asks it once per key)."""

    def indexed_except(self, keys: set[BlockKey]) -> list[BlockKey]:
        """The indexed keys that are not in ``keys``, at one moment."""

    def add_to_index(self, items: list[tuple[BlockKey, int]]) -> None:
        """Index stored blocks (key, stored bytes); keys already indexed stay as they are."""

    def drop_from_index(self, keys: list[BlockKey]) -> None:
        """Forget blocks that are no longer stored, with their manifest rows."""

    def set_aside(self, key: BlockKey, reason: str) -> None:
        """Quarantine a damaged block; it is a miss from now on."""

    def mark_index_complete(self) -> None:
        """From now on an index miss is a miss."""


def usable_rows(rows: list[Row]) -> list[tuple[BlockKey, int]]:
    """Index entries from manifest rows that name a valid key and size.

    A manifest is input, not truth: a damaged or hostile database (a shared PostgreSQL, a
    copied SQLite file) must not index a namespace like ``../x`` (a path outside the tier,
    which eviction would delete) or a size that breaks the accounting. Namespaces are few, so
    they are checked once each; the per-row checks are type and length tests.
    """
    good_ns = {ns for ns in {row[0] for row in rows} if valid_namespace(ns)}
    return [(BlockKey.trusted(ns, d), size) for ns, d, size in rows
            if ns in good_ns and type(d) is bytes and 0 < len(d) <= MAX_DIGEST_BYTES
            and type(size) is int and size >= 0]


def recover(index: RecoveredIndex, backend: Backend, manifest: ManifestStore | None,
            progress: RecoveryProgress, name: str) -> ManifestStore | None:
    """Fill ``index`` from ``manifest`` and ``backend``, reporting in ``progress``.

    Returns the manifest store to keep: ``manifest``, or the fresh one it was reset to (or
    None) when its rows could not be read. A shared store's read failure raises: its rows
    are the only index there is.
    """
    started = time.monotonic()
    progress.phase = "manifest"
    rows = None
    shared = manifest is not None and manifest.shared
    if manifest is not None:
        try:
            rows = manifest.load()
        except ManifestError as exc:
            if shared:
                raise
            log.warning("tier %s: %s; rebuilding it from the block files", name, exc)
            manifest = manifest.reset()
    if rows:
        rejected = 0
        for start in range(0, len(rows), _BATCH):
            usable = usable_rows(rows[start:start + _BATCH])
            rejected += min(_BATCH, len(rows) - start) - len(usable)
            index.add_to_index(usable)
        progress.manifest_rows = len(rows) - rejected
        if rejected:
            log.warning("tier %s: %d manifest rows name no valid block (bad namespace, digest or size): ignored",
                        name, rejected)
        progress.manifest_s = time.monotonic() - started
        # The manifest is the index: serve from memory now and reconcile in the background. Until
        # reconciliation ends, a block written behind the manifest's back is a miss (a recompute),
        # a row whose file is gone a miss that drops the row; never wrong bytes.
        index.mark_index_complete()
        log.info("tier %s: %d blocks indexed from the manifest in %.2fs%s", name, progress.manifest_rows,
                 progress.manifest_s, "" if shared else "; reconciling with the files")
    if shared:
        index.mark_index_complete()
        progress.phase = "done"
        progress.seconds = time.monotonic() - started
        return manifest

    progress.phase = "listing"
    seen: set[BlockKey] = set()
    unknown: list[BlockKey] = []
    indexed = index.indexed()
    for key in backend.list_keys():
        seen.add(key)
        if key not in indexed:
            unknown.append(key)
    progress.listed = len(seen)

    progress.phase = "headers"
    for start in range(0, len(unknown), _BATCH):
        found = []
        for key in unknown[start:start + _BATCH]:
            try:
                meta, stored = backend.read_header(key)
            except KeyError:
                continue
            except CorruptBlockError as exc:
                progress.corrupt += 1
                index.set_aside(key, exc.reason)
                continue
            found.append((key, stored))
            if manifest is not None:
                manifest.commit_put(key, meta.raw_len, stored, meta.codec, meta.tag)
        index.add_to_index(found)
        progress.added_from_files += len(found)

    if rows is not None and progress.listed - len(unknown) < len(rows):
        candidates = index.indexed_except(seen)
        gone = [k for k in candidates if not backend.exists(k)]  # a put may have landed after listing
        index.drop_from_index(gone)
        progress.missing_files = len(gone)

    progress.phase = "done"
    progress.seconds = time.monotonic() - started
    return manifest
