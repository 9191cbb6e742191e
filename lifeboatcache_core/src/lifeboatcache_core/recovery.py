"""Restart recovery: rebuild a tier's in-memory index, serving all the while (DESIGN §5-6).

1. Load the manifest (one query) into the index: the tier now answers from memory.
2. Reconcile with what is really stored, by name only: blocks the manifest does not know
   (written behind its back, or the manifest is gone/corrupt) are verified by header and
   added; rows whose file is gone are dropped. Files are the truth.

Until the index is complete, the tier reads the backend directly on an index miss, so the
first hit after a restart does not wait for recovery.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import ManifestError

if TYPE_CHECKING:
    from lifeboatcache_core.tier import Tier

log = logging.getLogger("lifeboatcache")
_BATCH = 65_536


@dataclass
class RecoveryProgress:
    """Exported as metrics and in ``cache.health()`` while a tier recovers."""

    phase: str = "pending"  # pending | manifest | listing | headers | done | failed
    manifest_rows: int = 0
    listed: int = 0
    added_from_files: int = 0
    missing_files: int = 0
    corrupt: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def recover(tier: Tier) -> RecoveryProgress:
    """Fill ``tier.index`` from its manifest and its backend; return what was found."""
    progress = tier.recovery
    started = time.monotonic()
    backend = tier.backend
    assert backend is not None

    progress.phase = "manifest"
    rows = None
    if tier.manifest is not None:
        try:
            rows = tier.manifest.load()
        except ManifestError as exc:
            log.warning("tier %s: %s; rebuilding it from the block files", tier.name, exc)
            tier.reset_manifest()
    if rows:
        for start in range(0, len(rows), _BATCH):
            tier.add_to_index([(BlockKey.trusted(ns, d), size) for ns, d, size in rows[start:start + _BATCH]])
        progress.manifest_rows = len(rows)
        log.info("tier %s: %d blocks indexed from the manifest in %.2fs",
                 tier.name, len(rows), time.monotonic() - started)

    progress.phase = "listing"
    seen: set[BlockKey] = set()
    unknown: list[BlockKey] = []
    index = tier.index
    for key in backend.list_keys():
        seen.add(key)
        if key not in index:
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
                tier.set_aside(key, exc.reason)
                continue
            found.append((key, stored))
            if tier.manifest is not None:
                tier.manifest.record_put(key, meta.raw_len, stored, meta.codec, meta.tag)
        tier.add_to_index(found)
        progress.added_from_files += len(found)

    if rows is not None and progress.listed - len(unknown) < len(rows):
        with tier.lock:
            candidates = [k for k in tier.index if k not in seen]
        gone = [k for k in candidates if not backend.exists(k)]  # a put may have landed after listing
        tier.drop_from_index(gone)
        progress.missing_files = len(gone)

    progress.phase = "done"
    progress.seconds = time.monotonic() - started
    return progress
