"""Power-cut rounds: mount :mod:`powercut_fs`, run a tier workload, cut the power, remount, check.

One round: mount the filesystem on the durable image the last cut left, open the tier there
(the restart: recovery reconciles manifest and files) and check what it serves, arm a cut at a
random mutating operation, run a writer (puts, reads, evictions, manifest flushes, close) in a
forkserver child until the cut ends the filesystem daemon, kill the writer, unmount.

The writer reports every acknowledged put and every eviction (before its unlink) through a
pipe, so the checker knows which blocks must still be there: ``durability = "fsync"``
promises every acknowledged block that was not evicted, across any number of later cuts.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from lifeboatcache_core.keys import BlockKey

import tests.core.crash  # noqa: F401  (sets its forkserver preload first; ours below is the union)

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(["tests.core._crash_preload", "tests.reliability._powercut_preload"])

NAMESPACE = "powercut"
PUTS_PER_ROUND = 10


def payload(r: int, i: int) -> bytes:
    rng = np.random.default_rng([r, i, 7])
    return rng.integers(0, 255, size=int(rng.integers(1, 12)) * 1024 + int(rng.integers(0, 1024)),
                        dtype=np.uint8).tobytes()


def block_key(r: int, i: int) -> BlockKey:
    return BlockKey(NAMESPACE, r.to_bytes(4, "big") + i.to_bytes(4, "big") * 7)


def parse_key(key: BlockKey) -> tuple[int, int]:
    return int.from_bytes(key.digest[:4], "big"), int.from_bytes(key.digest[4:8], "big")


def tier_config(path: Path, durability: str) -> dict[str, Any]:
    return {
        "tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 256 * 1024 / 1024**3, "path": str(path),
                   "durability": durability}],
        "fallback_local": {"enabled": False},
    }


@contextlib.contextmanager
def deletes_reported(report: Callable[[tuple[int, int]], None]) -> Iterator[None]:
    """Tell ``report`` about every block the file backend is about to delete (an eviction)."""
    import lifeboatcache_backend_file.backend as file_mod

    original = file_mod.FileBackend.delete

    def delete(self: Any, key: BlockKey) -> int:
        if key.namespace == NAMESPACE:
            report(parse_key(key))
        return original(self, key)

    file_mod.FileBackend.delete = delete  # type: ignore[method-assign]
    try:
        yield
    finally:
        file_mod.FileBackend.delete = original  # type: ignore[method-assign]


def _writer(config: dict[str, Any], r: int, variant: str, must_hold: list[tuple[int, int]],
            crash_at: int | None, mnt: str, conn: Connection) -> None:
    """Round ``r`` in one process: reopen the tier and check it, arm the cut, run the workload.

    The workload (puts, a read every third put, manifest flushes, a clean close) runs until the
    power cut stops the filesystem, or to its end. Reports through ``conn``: ("served", n),
    ("lost", key), ("wrong", key), ("unsynced", detail), ("ack", i), ("del", key), ("closed",).
    """
    import lifeboatcache_backend_file.backend as file_mod
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.config import load_config_dict

    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with lock:
            conn.send(msg)

    _apply_variant(file_mod, variant)
    rng = random.Random(r)
    with deletes_reported(lambda k: send(("del", k))):
        cache = TieredCache(load_config_dict(config), background_index=False)
        _verify(cache, r, must_hold, send)
        if crash_at is None:  # the last check: no workload
            cache.close()
            return
        with contextlib.suppress(FileNotFoundError):
            os.stat(os.path.join(mnt, f".powercut-arm-{crash_at}"))
        for i in range(PUTS_PER_ROUND):
            if cache.put([block_key(r, i)], [payload(r, i)]) == [True]:
                send(("ack", i))
            if i % 3 == 2:
                back = rng.randrange(max(0, r - 3), r + 1)
                j = rng.randrange(PUTS_PER_ROUND)
                cache.get([block_key(back, j)], [bytearray(len(payload(back, j)))])  # access rows
                for tier in cache.tiers:
                    if tier.manifest is not None:
                        tier.manifest.flush()
        cache.close()
    send(("closed",))


def _verify(cache: Any, r: int, must_hold: list[tuple[int, int]], send: Callable[[tuple[Any, ...]], None]) -> None:
    """After the restart: every block that must survive is served byte-exact, nothing is served
    wrong (the indexed blocks and the last round's, torn or not), and the manifest's rows match
    the index once recovery is done."""
    tier = cache.tiers[0]
    if not tier.up:
        send(("down", tier.reason))
        return
    indexed = {parse_key(k) for k in list(tier.index) if k.namespace == NAMESPACE}
    must = set(must_hold)
    want = must | indexed | ({(r - 1, i) for i in range(PUTS_PER_ROUND)} if r else set())
    served = 0
    for s, i in sorted(want):
        expected = payload(s, i)
        buf = bytearray(len(expected))
        if cache.get([block_key(s, i)], [buf]) == [True]:
            served += 1
            if bytes(buf) != expected:
                send(("wrong", (s, i)))
        elif (s, i) in must:
            send(("lost", (s, i)))
    send(("served", served))
    manifest = tier.manifest
    if manifest is not None and manifest.flush():
        rows = {parse_key(BlockKey.trusted(ns, d)) for ns, d, _n in manifest.load() if ns == NAMESPACE}
        indexed = {parse_key(k) for k in list(tier.index) if k.namespace == NAMESPACE}
        if rows != indexed:
            send(("unsynced", f"round {r}: manifest rows {len(rows)} vs index {len(indexed)}: "
                              f"{sorted(rows ^ indexed)[:4]}"))


def _apply_variant(file_mod: Any, variant: str) -> None:
    """The negative controls: file backends that forget one of the directory syncs."""
    if variant == "no-dir-fsync":  # the block's folder is not synced after its rename
        real = file_mod._fsync_dir
        levels = file_mod.SHARD_DEPTH  # a new root's block folder: <root>/<namespace>/<ab>

        def fsync_dir(directory: str) -> None:
            if not _is_shard(directory, levels):
                real(directory)

        file_mod._fsync_dir = fsync_dir
    elif variant == "no-new-dir-fsync":  # new shard folders' names are not synced (the old backend)
        def ensure_dir(self: Any, directory: str) -> None:
            os.makedirs(directory, exist_ok=True)
            self._dirs.add(directory)

        file_mod.FileBackend._ensure_dir = ensure_dir
        file_mod._missing_dirs = lambda path: []
    elif variant:
        raise ValueError(f"unknown variant {variant!r}")


def _is_shard(directory: str, levels: int) -> bool:
    """A block folder: its last ``levels`` names are two-hex-digit shard names."""
    parts = directory.rstrip("/").split("/")
    return len(parts) > levels + 1 and all(len(p) == 2 for p in parts[-levels:]) and len(parts[-levels - 1]) != 2


def _daemon(mountpoint: str, backing: str, seed: int, torn: bool, conn: Connection) -> None:
    from tests.reliability.powercut_fs import serve

    serve(mountpoint, backing, seed=seed, torn=torn, report=conn)


@dataclass
class Ledger:
    """What the checker knows: acknowledged puts, begun evictions, every key ever tried."""

    acked: set[tuple[int, int]] = field(default_factory=set)
    deleted: set[tuple[int, int]] = field(default_factory=set)
    cut_at: Counter[str] = field(default_factory=Counter)  # operation kind -> cuts there
    rounds: int = 0
    served: int = 0  # blocks read back and compared
    lost: set[tuple[int, int]] = field(default_factory=set)  # acknowledged, not evicted, gone
    wrong: list[str] = field(default_factory=list)  # served bytes that were not the block's
    problems: list[str] = field(default_factory=list)  # a tier down after a cut, rows != index
    checked: int = 0  # restarts whose check ran to its end

    def must_hold(self) -> set[tuple[int, int]]:
        return self.acked - self.deleted

    def summary(self) -> str:
        """One line for the terminal summary: where the power was cut and what that found."""
        where = ", ".join(f"{op} {n}" for op, n in self.cut_at.most_common())
        return (f"{self.rounds} cuts ({where}); {len(self.acked)} puts acknowledged, {len(self.deleted)} evicted, "
                f"{self.served} blocks served and compared, {len(self.lost)} acknowledged blocks lost, "
                f"{len(self.wrong)} wrong blocks served")


class PowerCutRig:
    """Mounts, cuts and remounts the filesystem at ``root``; one instance per test."""

    def __init__(self, root: Path, *, durability: str, torn: bool, variant: str = "") -> None:
        self.mnt = root / "mnt"
        self.backing = root / "backing"
        self.mnt.mkdir(parents=True)
        self.backing.mkdir()
        self.durability, self.torn, self.variant = durability, torn, variant
        self.tier = self.mnt / "tier"
        self.config = tier_config(self.tier, durability)
        self.daemon: Any = None
        self.daemon_conn: Connection | None = None
        self.ledger = Ledger()
        self.full_round_ops = 0  # mutating operations of the longest round that ran to its end

    # ------------------------------------------------------------------ mount

    def mount(self, seed: int, torn: bool) -> None:
        reader, writer = _ctx.Pipe(duplex=False)
        self.daemon = _ctx.Process(target=_daemon, args=(str(self.mnt), str(self.backing), seed, torn, writer),
                                   daemon=True)
        self.daemon.start()
        writer.close()
        if not reader.poll(60):
            raise RuntimeError("the power-cut filesystem did not mount within 60 s")
        msg = reader.recv()
        if msg != ("ready",):
            raise RuntimeError(f"the power-cut filesystem sent {msg!r} instead of ready")
        self.daemon_conn = reader

    def unmount(self) -> None:
        """After a cut (the daemon is gone): detach the dead mount, by path."""
        if self.daemon is not None:
            self.daemon.join(30)
            if self.daemon.is_alive():
                self.daemon.kill()  # not os.kill: see _run_writer
                self.daemon.join(30)
        if os.path.ismount(self.mnt) or _dead_mount(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)], check=True, capture_output=True)
        if self.daemon_conn is not None:
            self.daemon_conn.close()
        self.daemon, self.daemon_conn = None, None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.daemon is not None and self.daemon.is_alive():
                os.stat(self.mnt / ".powercut-now")
        with contextlib.suppress(Exception):
            self.unmount()
        shutil.rmtree(self.backing, ignore_errors=True)

    # ------------------------------------------------------------------ a round

    def round(self, r: int, rng: random.Random, max_ops: int) -> None:
        """Mount, check what the last cut left, run round ``r``'s writer into a cut, unmount."""
        self.mount(seed=rng.randrange(1 << 30), torn=self.torn and rng.random() < 0.5)
        try:
            self._run_writer(r, rng.randint(1, max_ops))
        finally:
            self.unmount()
        self.ledger.rounds += 1

    def final_check(self, r: int) -> None:
        """Mount once more after the last cut and check (no workload, no cut)."""
        self.mount(seed=0, torn=False)
        try:
            self._run_writer(r, None)
        finally:
            self.unmount()

    def _run_writer(self, r: int, crash_at: int | None) -> None:
        reader, writer = _ctx.Pipe(duplex=False)
        must_hold = sorted(self.ledger.must_hold()) if self.durability == "fsync" else []
        proc = _ctx.Process(target=_writer, daemon=True,
                            args=(self.config, r, self.variant, must_hold, crash_at, str(self.mnt), writer))
        proc.start()
        writer.close()
        assert self.daemon_conn is not None
        cut: tuple[int, str] | None = None
        try:
            while cut is None:  # until the filesystem is cut, or the writer's pipe closes (it finished)
                ready = multiprocessing.connection.wait([reader, self.daemon_conn], timeout=120)
                if not ready:
                    raise RuntimeError(f"round {r}: neither the writer nor the filesystem moved for 120 s")
                if self.daemon_conn in ready:
                    cut = self._cut_report()
                    continue
                try:
                    self._note(r, reader.recv())
                except EOFError:
                    break
            if cut is None:  # the writer ended before the armed operation: cut now
                with contextlib.suppress(OSError):
                    os.stat(self.mnt / ".powercut-now")
                cut = self._cut_report()
                if cut is not None and crash_at is not None:
                    self.full_round_ops = max(self.full_round_ops, cut[0])
            if crash_at is not None:
                self.ledger.cut_at[cut[1].split(" ", 1)[0] if cut else "none"] += 1
        finally:
            # Process.kill, not os.kill(pid): a forkserver child is reaped by the forkserver, not by
            # us, so one that exits just after is_alive() is gone before the signal and os.kill
            # raises ProcessLookupError (seen on a fast box); Process.kill ignores that
            if proc.is_alive():
                proc.kill()
            proc.join(30)
            while True:  # what it acknowledged before it died
                try:
                    self._note(r, reader.recv())
                except (EOFError, OSError):
                    break
            reader.close()

    def _cut_report(self) -> tuple[int, str] | None:
        """The daemon's last word: (operations counted, the operation the power was cut at)."""
        assert self.daemon_conn is not None
        if not self.daemon_conn.poll(30):
            return None
        try:
            msg = self.daemon_conn.recv()
        except EOFError:
            return None
        return (msg[1], msg[2]) if msg[0] == "crash" else None

    def _note(self, r: int, msg: tuple[Any, ...]) -> None:
        kind, ledger = msg[0], self.ledger
        if kind == "ack":
            ledger.acked.add((r, msg[1]))
        elif kind == "del":
            ledger.deleted.add(msg[1])
        elif kind == "served":
            ledger.served += msg[1]
            ledger.checked += 1
        elif kind == "lost":
            ledger.lost.add(msg[1])
        elif kind == "wrong":
            ledger.wrong.append(f"round {r}: block {msg[1]} served other bytes")
        elif kind in ("unsynced", "down"):
            ledger.problems.append(f"round {r}: {kind}: {msg[1]}")


def _dead_mount(path: Path) -> bool:
    """A FUSE mount whose daemon died answers ENOTCONN to a stat."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == 107  # ENOTCONN
    return False
