"""``fsck`` for a file tier: verify every block and compare the files with the manifest.

Counts ok / corrupt / partial (a dead writer's ``.partial``) / in_flight (a live writer's:
not a problem) / orphan (a file without a manifest row) / missing (a row without a file) /
foreign (a valid block of another key or namespace at this path). With ``fix``: damaged and
foreign blocks are quarantined, dead writers' partial files removed, and the manifest made to
match the files (files are the truth).

fsck may run on a live tier, and a shared one (NFS, ONTAP) has writers on other hosts: a
partial file is only removed when its writer is gone, by the same rule the tier's own sweep
uses (:func:`~lifeboatcache_backend_file.backend.partial_writer_gone`): a dead ``<pid>`` of this
host, or older than ``stale_partial_seconds`` for any host.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lifeboatcache_backend_file.backend import MANIFEST_NAME, PARTIAL, FileBackend, FileConfig, partial_writer_gone
from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.integrity import BlockSigner
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import Manifest, blocks, sqlite_url
from sqlalchemy import select

_FOREIGN = ("foreign namespace", "block belongs to another key")
MAX_LISTED = 20


@dataclass
class FsckReport:
    path: str
    manifest: str  # "present" | "absent"
    ok: int = 0
    corrupt: int = 0
    partial: int = 0
    in_flight: int = 0  # partial files of live writers (left alone)
    orphan: int = 0
    missing: int = 0
    foreign: int = 0
    fixed: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    @property
    def problems(self) -> int:
        return self.corrupt + self.partial + self.orphan + self.missing + self.foreign

    @property
    def problems_left(self) -> int:
        return max(0, self.problems - sum(self.fixed.values()))

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(problems=self.problems, problems_left=self.problems_left)
        return out

    def note(self, kind: str, what: str) -> None:
        if len(self.examples) < MAX_LISTED:
            self.examples.append(f"{kind}: {what}")


def _tier_name(manifest_path: Path) -> str | None:
    probe = Manifest(sqlite_url(manifest_path), "fsck-probe", flush_interval=3600)
    try:
        with probe._engine.connect() as conn:
            names = [r[0] for r in conn.execute(select(blocks.c.tier).distinct())]
    finally:
        probe.close()
    return names[0] if len(names) == 1 else None


def fsck(path: str | os.PathLike[str], *, fix: bool = False, tier: str | None = None,
         signer: BlockSigner | None = None,
         stale_partial_seconds: float = FileConfig.model_fields["stale_partial_seconds"].default) -> FsckReport:
    """Check the file tier at ``path``; with ``fix`` repair what can be repaired.

    ``signer``: the tier is keyed (``integrity = "keyed"``): a block whose tag does not verify
    counts as corrupt (a block planted without the key is intact by its hash alone).
    ``stale_partial_seconds``: the tier's option of that name (another host's partial file is
    in flight until it is older than this).
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    backend = FileBackend(FileConfig(path=root), tier="fsck")
    manifest_path = root / MANIFEST_NAME
    report = FsckReport(str(root), "present" if manifest_path.exists() else "absent")
    manifest = None
    rows: dict[BlockKey, int] = {}
    if manifest_path.exists() or fix:
        name = tier or (_tier_name(manifest_path) if manifest_path.exists() else None) or "nvme"
        manifest = Manifest(sqlite_url(manifest_path), name)
        rows = {BlockKey.trusted(ns, d): n for ns, d, n in manifest.load()}

    partials: list[Path] = []
    for p in root.rglob(f"*{PARTIAL}"):
        if p.name.startswith("NAMESPACE"):
            continue
        try:
            gone = partial_writer_gone(p.name, p.stat().st_mtime, stale_partial_seconds)
        except FileNotFoundError:  # its writer finished meanwhile
            continue
        if gone:
            partials.append(p)
            report.note("partial", str(p.relative_to(root)))
        else:
            report.in_flight += 1
    report.partial = len(partials)

    on_disk: set[BlockKey] = set()
    damaged: list[tuple[BlockKey, str]] = []
    orphans: list[tuple[BlockKey, Any]] = []
    for key in [k for _ns, _entry, k in backend.walk() if k is not None]:
        on_disk.add(key)
        try:
            meta, payload = backend.read(key)
            if signer is not None:
                signer.verify(meta, (payload,))
        except CorruptBlockError as exc:
            if exc.reason.startswith(_FOREIGN):
                report.foreign += 1
                report.note("foreign", f"{key.namespace}/{key.hex}: {exc.reason}")
            else:
                report.corrupt += 1
                report.note("corrupt", f"{key.namespace}/{key.hex}: {exc.reason}")
            damaged.append((key, exc.reason))
            continue
        except KeyError:
            continue
        report.ok += 1
        if key not in rows:
            orphans.append((key, (meta, backend.path_of(key))))
    if manifest is not None or report.manifest == "present":
        report.orphan = len(orphans)
        for key, _ in orphans[:MAX_LISTED]:
            report.note("orphan", f"{key.namespace}/{key.hex}")
    missing = [k for k in rows if k not in on_disk]
    report.missing = len(missing)
    for key in missing[:MAX_LISTED]:
        report.note("missing", f"{key.namespace}/{key.hex}")

    if fix:
        for key, reason in damaged:
            backend.quarantine(key, reason)
            if manifest is not None:
                manifest.record_delete(key)
        report.fixed["corrupt"] = report.corrupt
        report.fixed["foreign"] = report.foreign
        report.fixed["partial"] = sum(_unlink(p) for p in partials)
        assert manifest is not None
        for key, (meta, file_path) in orphans:
            manifest.commit_put(key, meta.raw_len, os.stat(file_path).st_size, meta.codec, meta.tag)
        report.fixed["orphan"] = report.orphan
        for key in missing:
            manifest.record_delete(key)
        report.fixed["missing"] = report.missing
    if manifest is not None:
        manifest.close()
    return report


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0
