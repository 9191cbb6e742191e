"""Local file tier (NVMe): one self-describing block file per key, sharded folders.

Layout::

    <path>/.layout                                     shard depth of this tier: "1" or "2"
    <path>/<namespace>/<ab>/<digest-hex>.lbk           blocks (depth 1)
    <path>/<namespace>/<ab>/<cd>/<digest-hex>.lbk      blocks of tiers made before .layout (depth 2)
    <path>/<namespace>/NAMESPACE.json                  human-readable namespace source
    <path>/.bad/<namespace>/<digest-hex>.<time>.lbk    quarantined blocks
    <final>.<host>-<pid>-<rand>.partial                in-flight writes (swept on open)

One level of 256 shard folders: engines' keys are uniform hashes, so a second level (65,536
folders) made a fresh tier create a folder for almost every block it stored (a mkdir and its
journal write on the store path: 0.81 of raw O_DIRECT write speed in ``bench tiers`` against
0.9x with one level); 256 folders of a few thousand entries each are what ext4's and XFS's
hashed directories are built for. A tier root written before ``.layout`` existed keeps depth 2;
a missing or empty marker (a power cut right after a tier was made) is read off the tree.

Writes go to a same-directory ``.partial`` then ``os.replace`` (atomic on POSIX), so a
reader sees a whole block or nothing. Reads go with ``preadv`` straight into the caller's
buffer; with ``o_direct`` every transfer is 4 KiB aligned through a per-thread scratch map, and a
block whose codec codes in steps (``put_stream``) is written a MiB at a time as it is coded, its
header page last.

Every system call releases and retakes the GIL, and inside an engine whose scheduler loop
holds it, each retake waits up to the switch interval (5 ms). So a buffered read of a block
of known size is open + one ``preadv`` (header, payload, trailer) + close: headers are padded
to ``HEADER_ALIGN`` so the blocks of one stream share a header length, which the backend
remembers per payload size; a guess that does not fit falls back to fstat + header + body.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xxhash
from lifeboatcache_core.abc import Backend, PayloadSink, PluginConfig, StreamEncoder
from lifeboatcache_core.chunkfile import (
    DIRECT_ALIGN,
    FIXED_LEN,
    TRAILER_LEN,
    BlockMeta,
    Buffer,
    block_length,
    build_header,
    build_trailer,
    check_trailer,
    parse_fixed,
    parse_header,
    payload_digest,
)
from lifeboatcache_core.errors import CorruptBlockError, TierFullError, TierUnavailableError
from lifeboatcache_core.keys import MAX_DIGEST_BYTES, BlockKey, valid_namespace
from lifeboatcache_core.manifest import sqlite_url
from lifeboatcache_core.scratch import ThreadScratch
from pydantic import Field

SUFFIX = ".lbk"
LAYOUT_NAME = ".layout"
#: shard folder levels of a new tier (``<ab>/``); roots from before LAYOUT_NAME have 2 (``<ab>/<cd>/``)
SHARD_DEPTH = 1
MANIFEST_NAME = "manifest.sqlite"
PARTIAL = ".partial"
HEAD_READ = 4096
HEADER_ALIGN = 64  # buffered writes: meta that differs by a few characters keeps one header length
_MAX_HEADER_GUESSES = 64
#: an O_DIRECT ``read_payload`` reads a block in pieces of this size, each handed on as it arrives:
#: large enough that the disk still gets big requests (one whole-block read is split and queued
#: in parallel by the kernel; a piece is one request), small enough that a 256-token SmolLM2
#: block's lossless payload (~4 MB) is decoded while most of it is still being read
STREAM_RANGE = 1024 * 1024
#: an O_DIRECT ``put_stream`` writes the payload in pieces of about this size as they are coded
STREAM_WRITE = 1024 * 1024
GB = 1024**3
#: a filesystem that is full (or the user's quota): nothing wrong with the tier, nothing more fits
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: free space kept for the manifest beside the blocks: 2 % of the filesystem, at most 64 MiB
METADATA_ROOM_SHARE = 0.02
METADATA_ROOM_MAX = 64 * 1024**2
log = logging.getLogger(__name__)
_HOST = xxhash.xxh32_hexdigest(socket.gethostname().encode())


class FileConfig(PluginConfig):
    path: Path
    durability: Literal["none", "fsync"] = "none"
    o_direct: bool = False
    reserve_free_gb: float = Field(default=0.0, ge=0)
    on_corrupt: Literal["quarantine", "delete"] = "quarantine"
    #: partial files older than this are swept even if their writer might live (other hosts)
    stale_partial_seconds: float = Field(default=3600.0, gt=0)


class _WrongSize(Exception):
    """The size the caller gave is not this file's (its index is stale); read with the file's own."""


def _align_up(n: int, a: int = DIRECT_ALIGN) -> int:
    return (n + a - 1) // a * a


class FileBackend(Backend):
    persistent = True
    config_model = FileConfig

    def __init__(self, config: FileConfig, *, tier: str = "file") -> None:
        super().__init__(config, tier=tier)
        self.config: FileConfig = config
        self.root = Path(config.path)
        self._fsync = config.durability == "fsync"
        created = _missing_dirs(str(self.root))
        self.root.mkdir(parents=True, exist_ok=True)
        self._root = str(self.root)
        self._dirs: set[str] = set()
        self._synced: set[str] = set()  # directories whose entries we made durable (fsync only)
        self._dirs_lock = threading.Lock()
        self._scratch = ThreadScratch()
        if self._fsync:
            for directory in created:
                _fsync_dir(os.path.dirname(directory))
        self.shard_depth = self._shard_depth()
        self._direct = config.o_direct and hasattr(os, "O_DIRECT") and self._takes_o_direct()
        self._reserve = int(config.reserve_free_gb * GB)
        # payload bytes -> header bytes of the last block seen with that payload size
        self._header_len: dict[int, int] = {}

    def _takes_o_direct(self) -> bool:
        """Whether this root's filesystem opens files with ``O_DIRECT``, tried once on a probe file.

        tmpfs before Linux 6.6 and some FUSE and overlay mounts refuse it (``open`` fails with
        EINVAL): with ``o_direct = true`` there, every store would fail. Such a tier does its
        block I/O buffered instead and says so once. Any other error (a read-only or full root)
        is not the flag's: the flag stays, and stores report what the root does.
        """
        probe = f"{self._root}/.o_direct.{_HOST}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_DIRECT, 0o644))
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                return True
            log.warning("tier %s: the filesystem at %s does not take O_DIRECT (%s); o_direct = true is ignored "
                        "and block I/O goes through the page cache", self.tier, self._root, exc.strerror)
            return False
        finally:
            _unlink_quiet(probe)  # some filesystems create the file before they refuse the flag
        return True

    # ------------------------------------------------------------------ paths

    def _shard_depth(self) -> int:
        """This root's shard depth, from its ``.layout``. Without one (a root from before it, or
        a marker a power cut left empty) the depth is read off the tree and recorded: a shard
        folder holding folders is the two-level layout; anything else (empty root included)
        gets SHARD_DEPTH."""
        marker = self.root / LAYOUT_NAME
        try:
            text = marker.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text in ("1", "2"):
            return int(text)
        if text:
            raise ValueError(f"{marker}: shard depth {text!r} is neither 1 nor 2")
        depth = self._depth_on_disk()
        tmp = marker.with_name(f"{LAYOUT_NAME}.{_HOST}-{os.getpid()}{PARTIAL}")
        try:  # durable before it names the layout: once per root, so always synced
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, f"{depth}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, marker)  # another node racing on a shared root writes the same answer
            _fsync_dir(self._root)
        except OSError as exc:  # a read-only root: the depth is still right for this process
            log.warning("file tier %s: cannot record its shard depth in %s: %s", self._root, marker, exc)
        return depth

    def _depth_on_disk(self) -> int:
        for ns in _subdirs(self._root):
            if ns.name.startswith(".") or not valid_namespace(ns.name):
                continue
            for shard in _subdirs(ns.path):
                if _subdirs(shard.path):
                    return 2
                with os.scandir(shard.path) as entries:
                    if any(e.name.endswith((SUFFIX, PARTIAL)) for e in entries):
                        return 1
        return SHARD_DEPTH

    def path_of(self, key: BlockKey) -> str:
        h = key.hex
        if self.shard_depth == 1:
            return f"{self._root}/{key.namespace}/{h[0:2]}/{h}{SUFFIX}"
        return f"{self._root}/{key.namespace}/{h[0:2]}/{h[2:4]}/{h}{SUFFIX}"

    def _ensure_dir(self, directory: str) -> None:
        """Create a shard folder once. With ``durability = "fsync"`` its name must survive a power
        cut too: a block's ``rename`` is made durable by syncing its folder, but a folder made
        by ``makedirs`` is itself only a name in its parent until the parent is synced (found by
        the power-cut filesystem of tests/reliability: every acknowledged block of a new tier
        was gone). So each ancestor up to the tier root is synced once per process, under the
        lock, before any block in it is acknowledged."""
        if directory in self._dirs:
            return
        if not self._fsync:
            os.makedirs(directory, exist_ok=True)
            with self._dirs_lock:
                self._dirs.add(directory)
            return
        with self._dirs_lock:
            if directory in self._dirs:
                return
            os.makedirs(directory, exist_ok=True)
            parent = os.path.dirname(directory)
            while len(parent) >= len(self._root) and parent not in self._synced:
                _fsync_dir(parent)
                self._synced.add(parent)
                parent = os.path.dirname(parent)
            self._dirs.add(directory)

    # ------------------------------------------------------------------ write

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        pieces = [memoryview(p).cast("B") if not isinstance(p, bytes) else p for p in payload]
        stored = self._write_file(key, lambda fd: self._write_pieces(fd, pieces, meta))
        assert stored is not None
        return stored

    def put_stream(self, key: BlockKey, encoder: StreamEncoder,
                   finish: Callable[[Sequence[Buffer], dict[str, Any]], BlockMeta | None]) -> int | None:
        """With ``o_direct``, each ``STREAM_WRITE`` of settled payload is written as soon as it is
        coded: while this thread waits for the disk, the tier's other threads code, so the CPU
        and the disk work at once (one whole-block write after one whole-block encode left the
        disk idle during every encode: 0.90 of raw write speed in ``bench tiers --codec lossless``).
        The page holding the header and the codec's head is written last."""
        if not self._direct:
            return super().put_stream(key, encoder, finish)
        return self._write_file(key, lambda fd: self._write_streamed(fd, encoder, finish))

    def _write_file(self, key: BlockKey, write: Callable[[int], int | None]) -> int | None:
        """Create the block's ``.partial``, ``write(fd)`` it (the file's length, or None to keep
        nothing), then move it into place atomically."""
        final = self.path_of(key)
        directory = final.rpartition("/")[0]
        self._ensure_dir(directory)
        tmp = f"{final}.{_HOST}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | (os.O_DIRECT if self._direct else 0)
        try:
            fd = os.open(tmp, flags, 0o644)
        except FileNotFoundError:  # shard dir removed behind our back: recreate once
            with self._dirs_lock:
                self._dirs.discard(directory)
            self._ensure_dir(directory)
            fd = os.open(tmp, flags, 0o644)
        try:
            total = write(fd)
            if total is not None and self._fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quiet(tmp)
            raise
        os.close(fd)
        if total is None:
            _unlink_quiet(tmp)
            return None
        try:
            os.replace(tmp, final)
        except BaseException:
            _unlink_quiet(tmp)
            raise
        if self._fsync:
            _fsync_dir(directory)
        return total

    def _write_pieces(self, fd: int, pieces: list[Buffer], meta: BlockMeta) -> int:
        """The whole block (header, ``pieces``, trailer) at offset 0; the file's length."""
        payload_len = sum(len(p) for p in pieces)
        trailer = build_trailer(payload_digest(pieces), payload_len)
        if self._direct:
            header = build_header(meta, payload_len, align=DIRECT_ALIGN)
            total = _align_up(len(header) + payload_len + TRAILER_LEN)  # FLAG_ALIGNED: zero-padded, no ftruncate
            self._write_direct(fd, header, pieces, trailer, total)
            return total
        header = build_header(meta, payload_len, align=HEADER_ALIGN)
        self._remember_header(payload_len, len(header))
        total = len(header) + payload_len + TRAILER_LEN
        _pwritev_all(fd, [header, *pieces, trailer], total)
        return total

    def _write_streamed(self, fd: int, encoder: StreamEncoder,
                        finish: Callable[[Sequence[Buffer], dict[str, Any]], BlockMeta | None]) -> int | None:
        """``put_stream``'s O_DIRECT write: settled whole pages of ``encoder.out`` go to the file
        (after a one-page header) as they are coded; then the head, the rest and the trailer.
        A header longer than a page or a block stored uncoded is rewritten whole."""
        out = encoder.out
        head_pages = _align_up(encoder.head_len)
        written = head_pages  # payload bytes [head_pages, written) are on the disk
        while not encoder.finished:
            coded = encoder.step(written + STREAM_WRITE)
            ready = coded // DIRECT_ALIGN * DIRECT_ALIGN
            if not encoder.finished and ready > written:
                _pwritev_all(fd, [out[written:ready]], ready - written, DIRECT_ALIGN + written)
                written = ready
        pieces, params = encoder.result()
        meta = finish(pieces, params)
        if meta is None:
            return None
        length = encoder.length
        if length is None or length < head_pages:  # coded elsewhere, or too short to stream
            return self._write_pieces(fd, list(pieces), meta)
        header = build_header(meta, length, align=DIRECT_ALIGN)
        if len(header) != DIRECT_ALIGN:
            return self._write_pieces(fd, list(pieces), meta)
        payload = out[:length]
        trailer = build_trailer(payload_digest([payload]), length)
        total = _align_up(DIRECT_ALIGN + length + TRAILER_LEN)
        view = self._staged(header, payload[written:], trailer, total - DIRECT_ALIGN - written)
        try:
            direct = (length - written) // DIRECT_ALIGN * DIRECT_ALIGN
            _pwritev_all(fd, [payload[written:written + direct], view[DIRECT_ALIGN:]] if direct
                         else [view[DIRECT_ALIGN:]], total - DIRECT_ALIGN - written, DIRECT_ALIGN + written)
            _pwritev_all(fd, [view[:DIRECT_ALIGN], out[:head_pages]] if head_pages else [view[:DIRECT_ALIGN]],
                         DIRECT_ALIGN + head_pages)
        finally:
            view.release()
        return total

    def _staged(self, header: bytes, rest: memoryview, trailer: bytes, tail_len: int) -> memoryview:
        """The per-thread scratch map as ``header`` then a staged tail: ``rest``'s last partial page,
        ``trailer`` and zeros up to ``tail_len`` (of which ``rest``'s whole pages are not staged:
        they are written from where they lie). A view of exactly those bytes."""
        head = len(header)
        direct = len(rest) // DIRECT_ALIGN * DIRECT_ALIGN
        left = len(rest) - direct
        staged = tail_len - direct
        scratch = self._scratch.get(head + staged)
        scratch[:head] = header
        scratch[head: head + left] = rest[direct:]
        scratch[head + left: head + left + TRAILER_LEN] = trailer
        scratch[head + left + TRAILER_LEN: head + staged] = bytes(staged - left - TRAILER_LEN)
        return memoryview(scratch)[: head + staged]

    def _write_direct(self, fd: int, header: bytes, pieces: list[Buffer], trailer: bytes, total: int) -> None:
        """O_DIRECT write: every iovec 4 KiB aligned in memory and length.

        A single payload that starts on a page (the usual case: engine KV pages, numpy/mmap
        buffers, a codec's payload in the tier's scratch) is written straight from the caller's
        memory up to its last whole page; only the rest of it shares a staged page with the
        trailer. Anything else is staged whole in the per-thread scratch map (one memcpy).
        """
        padded = _align_up(total)
        head = len(header)  # a multiple of DIRECT_ALIGN: built with align=DIRECT_ALIGN
        if len(pieces) == 1 and _starts_aligned(pieces[0]):
            payload = memoryview(pieces[0]).cast("B")
            direct = len(payload) // DIRECT_ALIGN * DIRECT_ALIGN
            view = self._staged(header, payload, trailer, padded - head)
            try:
                _pwritev_all(fd, [view[:head], payload[:direct], view[head:]] if direct else [view], padded)
            finally:
                view.release()
        else:
            buf = self._scratch.get(padded)
            pos = head
            buf[:pos] = header
            for p in pieces:
                n = len(p)
                buf[pos:pos + n] = p
                pos += n
            buf[pos:pos + TRAILER_LEN] = trailer
            pos += TRAILER_LEN
            buf[pos:padded] = bytes(padded - pos)
            view = memoryview(buf)[:padded]
            try:
                _pwritev_all(fd, [view], padded)
            finally:
                view.release()

    # ------------------------------------------------------------------ read

    def _open_for_read(self, key: BlockKey) -> int:
        path = self.path_of(key)
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if self._direct else 0))
        except FileNotFoundError:  # (a filesystem without O_DIRECT was found out when the tier opened)
            raise KeyError(key) from None

    def read_payload(self, key: BlockKey, sink: PayloadSink,
                     stored_size: int | None = None) -> tuple[BlockMeta, int]:
        """The whole block into this thread's scratch map, handed to ``sink`` from there.

        With the size the index knows, a buffered read is open + one ``preadv`` + close (no
        fstat, no separate header read), and nothing is allocated or copied per block. With
        ``o_direct`` the block is read in ``STREAM_RANGE`` pieces and a sink that asks for it is
        fed each arrived prefix of the payload: the codec decodes a piece while the disk serves
        the next read of this or another I/O thread, where a whole-block read leaves the disk
        idle while every thread decodes. A size that does not match the file (an index that is
        stale: another writer replaced the block) is not trusted: the file's own size is.
        """
        fd = self._open_for_read(key)
        try:
            if stored_size is not None:
                try:
                    return self._read_to_sink(fd, key, sink, stored_size, hinted=True), stored_size
                except _WrongSize:
                    pass
            size = os.fstat(fd).st_size
            return self._read_to_sink(fd, key, sink, size, hinted=False), size
        finally:
            os.close(fd)

    def _read_to_sink(self, fd: int, key: BlockKey, sink: PayloadSink, size: int, *, hinted: bool) -> BlockMeta:
        # the last read asks for more than the block: a file longer than its header says is not it
        limit = _align_up(size) + DIRECT_ALIGN if self._direct else size + 1
        step = STREAM_RANGE if self._direct else limit
        view = memoryview(self._scratch.get(max(limit, FIXED_LEN)))
        try:
            have = os.preadv(fd, [view[:min(step, limit)]], 0)
            if hinted:
                if have < FIXED_LEN:
                    raise _WrongSize
                header_len, payload_len, _crc = parse_fixed(view[:FIXED_LEN])
                if block_length(header_len, payload_len, int.from_bytes(view[8:12], "little")) != size:
                    raise _WrongSize
            hdr = parse_header(view[:have], size, key)
            start, n = hdr.header_len, hdr.payload_len
            end = start + n
            streaming = sink.begin(hdr.meta, n)
            while have < size:
                if streaming and have > start:
                    with view[start:min(have, end)] as prefix:
                        sink.feed(prefix)
                got = os.preadv(fd, [view[have:min(limit, have + step)]], have)
                if got <= 0:
                    raise CorruptBlockError(f"short read ({have} of {size} bytes)")
                have += got
            if have > size:
                if hinted:
                    raise _WrongSize
                raise CorruptBlockError(f"block file holds more than its {size} bytes")
            with view[start:end] as payload:
                check_trailer(view[end:end + TRAILER_LEN], n, (payload,))
                sink.end(payload)
            return hdr.meta
        finally:
            view.release()

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        fd = self._open_for_read(key)
        try:
            if self._direct:
                return self._read_direct(fd, os.fstat(fd).st_size, key, dest)
            if dest is not None:
                guess = self._header_len.get(dest.nbytes)
                if guess is not None:
                    found = self._read_guessed(fd, key, dest, guess)
                    if found is not None:
                        return found
            return self._read_buffered(fd, key, dest)
        finally:
            os.close(fd)

    def _read_guessed(self, fd: int, key: BlockKey, dest: memoryview,
                      header_len: int) -> tuple[BlockMeta, memoryview] | None:
        """One ``preadv`` for a block whose header length we expect; None when it is not that block."""
        n = dest.nbytes
        head = bytearray(header_len)
        tail = bytearray(TRAILER_LEN + 1)  # one byte more: a longer file is not the block we expect
        got = os.preadv(fd, [head, dest, tail], 0)
        if got != header_len + n + TRAILER_LEN:
            return None
        try:
            hdr = parse_header(head, got, key)
        except CorruptBlockError:
            return None  # the careful path reads it again and decides
        if hdr.header_len != header_len or hdr.payload_len != n:
            return None
        check_trailer(memoryview(tail)[:TRAILER_LEN], n, (dest,))
        return hdr.meta, dest

    def _read_buffered(self, fd: int, key: BlockKey, dest: memoryview | None) -> tuple[BlockMeta, memoryview]:
        size = os.fstat(fd).st_size
        head = os.pread(fd, HEAD_READ, 0)
        header_len = parse_fixed(head)[0]
        if header_len > len(head):
            head = os.pread(fd, header_len, 0)
        hdr = parse_header(head, size, key)
        n = hdr.payload_len
        buf: Buffer = dest if dest is not None and dest.nbytes == n else bytearray(n)
        trailer = bytearray(TRAILER_LEN)
        got = os.preadv(fd, [buf, trailer], hdr.header_len)
        if got != n + TRAILER_LEN:
            raise CorruptBlockError(f"short read ({got} of {n + TRAILER_LEN} bytes)")
        check_trailer(trailer, n, (buf,))
        self._remember_header(n, hdr.header_len)
        return hdr.meta, memoryview(buf)

    def _remember_header(self, payload_len: int, header_len: int) -> None:
        if len(self._header_len) >= _MAX_HEADER_GUESSES and payload_len not in self._header_len:
            self._header_len.clear()  # many payload sizes (a compressing codec): guesses would rarely fit
        self._header_len[payload_len] = header_len

    def _read_direct(self, fd: int, size: int, key: BlockKey, dest: memoryview | None) -> tuple[BlockMeta, memoryview]:
        if dest is not None and _is_aligned(dest) and size == _align_up(DIRECT_ALIGN + dest.nbytes + TRAILER_LEN):
            return self._read_direct_into(fd, size, key, dest)
        padded = _align_up(size)
        buf = self._scratch.get(padded)
        view = memoryview(buf)
        try:
            got = os.preadv(fd, [view[:padded]], 0)
            if got != size:
                raise CorruptBlockError(f"short read ({got} of {size} bytes)")
            hdr = parse_header(view[:min(size, max(HEAD_READ, parse_fixed(view[:24])[0]))], size, key)
            start, n = hdr.header_len, hdr.payload_len
            payload = view[start:start + n]
            check_trailer(view[start + n:start + n + TRAILER_LEN], n, (payload,))
            out: Buffer = dest if dest is not None and dest.nbytes == n else bytearray(n)
            memoryview(out)[:] = payload
            payload.release()
            return hdr.meta, memoryview(out)
        finally:
            view.release()

    def _read_direct_into(self, fd: int, size: int, key: BlockKey, dest: memoryview) -> tuple[BlockMeta, memoryview]:
        """Copy-free O_DIRECT read: header page, payload straight into ``dest``, trailer page."""
        scratch = self._scratch.get(2 * DIRECT_ALIGN)
        view = memoryview(scratch)
        try:
            head, tail = view[:DIRECT_ALIGN], view[DIRECT_ALIGN: 2 * DIRECT_ALIGN]
            got = os.preadv(fd, [head, dest, tail], 0)
            if got != size:
                raise CorruptBlockError(f"short read ({got} of {size} bytes)")
            hdr = parse_header(head, size, key)
            if hdr.header_len != DIRECT_ALIGN:
                raise CorruptBlockError(f"header_len {hdr.header_len} does not match the file layout")
            check_trailer(tail[:TRAILER_LEN], hdr.payload_len, (dest,))
            return hdr.meta, dest
        finally:
            view.release()

    # ------------------------------------------------------------------ other ops

    def exists(self, key: BlockKey) -> bool:
        return os.path.exists(self.path_of(key))

    def delete(self, key: BlockKey) -> int:
        path = self.path_of(key)
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            return 0
        return size

    def quarantine(self, key: BlockKey, reason: str) -> None:
        path = self.path_of(key)
        if self.config.on_corrupt == "delete":
            _unlink_quiet(path)
            return
        bad = self.root / ".bad" / key.namespace
        bad.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, bad / f"{key.hex}.{time.time_ns()}{SUFFIX}")
        except FileNotFoundError:
            pass

    def walk(self) -> Iterator[tuple[str, os.DirEntry[str], BlockKey | None]]:
        """Walk the shard folders once: (namespace, entry, key or None for a non-block file)."""
        for ns in _subdirs(self._root):
            if ns.name.startswith(".") or not valid_namespace(ns.name):
                continue
            namespace = ns.name
            leaves = _subdirs(ns.path)
            if self.shard_depth == 2:
                leaves = [b for a in leaves for b in _subdirs(a.path)]
            for leaf in leaves:
                with os.scandir(leaf.path) as entries:
                    for entry in entries:
                        name = entry.name
                        key = None
                        if name.endswith(SUFFIX):
                            try:
                                digest = bytes.fromhex(name[: -len(SUFFIX)])
                            except ValueError:
                                continue
                            if not 0 < len(digest) <= MAX_DIGEST_BYTES:
                                continue
                            key = BlockKey.trusted(namespace, digest)
                        yield namespace, entry, key

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        """Every block file with its size (and sweep dead writers' ``.partial`` files on the way)."""
        for _ns, entry, key in self.walk():
            if key is not None:
                try:
                    yield key, entry.stat().st_size
                except OSError:
                    continue
            elif entry.name.endswith(PARTIAL):
                self._sweep_partial(entry)

    def list_keys(self) -> Iterator[BlockKey]:
        """Block keys from file names alone (no stat, no open); sweeps dead writers' partials."""
        for _ns, entry, key in self.walk():
            if key is not None:
                yield key
            elif entry.name.endswith(PARTIAL):
                self._sweep_partial(entry)

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        """Header and meta checks only (magic, lengths, crc, identity): one small read."""
        try:
            fd = os.open(self.path_of(key), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise KeyError(key) from None
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, HEAD_READ, 0)
            header_len = parse_fixed(head)[0]
            if header_len > len(head):
                head = os.pread(fd, header_len, 0)
            return parse_header(head, size, key).meta, size
        finally:
            os.close(fd)

    def default_manifest_url(self) -> str:
        return sqlite_url(self.root / MANIFEST_NAME)

    def sweep_partials(self) -> int:
        """Remove ``.partial`` files left by dead writers; return how many."""
        return sum(self._sweep_partial(entry) for _ns, entry, key in self.walk()
                   if key is None and entry.name.endswith(PARTIAL))

    def _sweep_partial(self, entry: os.DirEntry[str]) -> int:
        """Delete a partial whose writer is dead (same host) or that is stale (any host)."""
        try:
            if not partial_writer_gone(entry.name, entry.stat().st_mtime, self.config.stale_partial_seconds):
                return 0
            os.unlink(entry.path)
            return 1
        except OSError:
            return 0

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        path = self.root / namespace / "NAMESPACE.json"
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"NAMESPACE.json.{os.getpid()}{PARTIAL}")
        tmp.write_text(json.dumps(info, indent=1, sort_keys=True))
        os.replace(tmp, path)

    def probe(self) -> None:
        """Write, read back and delete a small file; ``TierFullError`` when nothing more fits.

        A full disk still serves every block on it (the tier decides whether that keeps it up),
        so with no room for the probe file the read side is checked instead (the directory
        lists) and the error says full, not broken.
        """
        probe_dir = self.root / ".probe"
        name = probe_dir / f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        data = secrets.token_bytes(4096)
        try:
            probe_dir.mkdir(parents=True, exist_ok=True)
            with open(name, "wb") as fh:
                fh.write(data)
            if name.read_bytes() != data:
                raise TierUnavailableError(f"{self.root}: probe read back different bytes")
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS:
                raise TierUnavailableError(f"{self.root}: {exc.strerror or exc}") from exc
            try:  # full: what is on it must still read
                os.listdir(self._root)
            except OSError as read_exc:
                raise TierUnavailableError(f"{self.root}: {read_exc.strerror or read_exc}") from read_exc
            raise TierFullError(f"{self.root}: {exc.strerror or exc}") from exc
        finally:
            _unlink_quiet(str(name))
        free = self.free_bytes()
        if free is not None and free <= 0:
            raise TierFullError(
                f"{self.root}: filesystem has less free space than reserve_free_gb={self.config.reserve_free_gb} "
                "and the manifest's room")

    def free_bytes(self) -> int:
        """Free bytes usable by blocks: the filesystem's free space less ``reserve_free_gb`` and
        the manifest's room (``METADATA_ROOM``: its SQLite journal grows on the same disk, and a
        disk filled to the last page fails every manifest commit)."""
        st = os.statvfs(self._root)
        room = min(METADATA_ROOM_MAX, int(st.f_blocks * st.f_frsize * METADATA_ROOM_SHARE))
        return st.f_bavail * st.f_frsize - self._reserve - room


def _pwritev_all(fd: int, bufs: list[Buffer], total: int, offset: int = 0) -> None:
    """Write ``bufs`` (``total`` bytes) at ``offset``, all of them."""
    written = os.pwritev(fd, bufs, offset)
    if written == total:
        return
    # Rare short write (signals, odd filesystems): finish byte-accurately.
    flat = memoryview(b"".join(bytes(b) for b in bufs))
    while written < total:
        n = os.pwrite(fd, flat[written:], offset + written)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        written += n


def _is_aligned(buf: Buffer) -> bool:
    """Page-aligned address and a whole number of 4 KiB pages: usable as an O_DIRECT iovec."""
    n = memoryview(buf).nbytes
    return n > 0 and n % DIRECT_ALIGN == 0 and _starts_aligned(buf)


def _starts_aligned(buf: Buffer) -> bool:
    """Non-empty and page-aligned in memory: its whole pages are usable as an O_DIRECT iovec."""
    return memoryview(buf).nbytes > 0 and int(np.frombuffer(buf, np.uint8).ctypes.data) % DIRECT_ALIGN == 0


def partial_writer_gone(name: str, mtime: float, stale_partial_seconds: float) -> bool:
    """Whether the writer of the ``.partial`` file ``name`` is gone, so the file may be removed.

    The name carries ``<host>-<pid>``: on this host a dead pid means a dead writer. Another
    host's pid means nothing here (on a shared NFS/ONTAP tier its writer may be mid-block), so
    there, and for a name we cannot read, only age tells: older than ``stale_partial_seconds``.
    """
    if time.time() - mtime > stale_partial_seconds:
        return True
    try:
        tag = name[: -len(PARTIAL)].rsplit(".", 1)[1]
        host, pid, _ = tag.split("-")
        return host == _HOST and not _pid_alive(int(pid))
    except (ValueError, IndexError):
        return False


def _missing_dirs(path: str) -> list[str]:
    """``path`` and those of its ancestors that do not exist yet, top-down (what makedirs will create)."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing[::-1]


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _subdirs(path: str) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
