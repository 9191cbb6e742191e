"""Block file format, version 1 (DESIGN §5).

::

    fixed header  magic b"LBCK" | u16 version | u16 header_len | u32 flags | u64 payload_len
                  | u32 crc32(meta)
    meta          JSON (padded with spaces up to header_len, which JSON parsers ignore)
    payload       codec output
    trailer       xxh3_128(payload) | u64 payload_len (again) | magic b"KCBL"
    [zero pad]    only with flag ALIGNED (O_DIRECT writers): up to the next 4 KiB

The same bytes are used for files and for objects in S3-like stores, so any backend can
verify any block. Every check that fails raises :class:`CorruptBlockError`; callers turn it
into a miss. Lengths read from a block are bounded by the bytes actually present, so a
hostile length field cannot make us allocate more than the file holds.
"""

from __future__ import annotations

import errno
import json
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import xxhash

from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.keys import BlockKey

MAGIC = b"LBCK"
TRAILER_MAGIC = b"KCBL"
VERSION = 1
FIXED = struct.Struct("<4sHHIQI")
TRAILER = struct.Struct("<16sQ4s")
FIXED_LEN = FIXED.size  # 24
TRAILER_LEN = TRAILER.size  # 28
MAX_HEADER_LEN = 0xFFFF
FLAG_ALIGNED = 0x1  # payload starts at a 4 KiB boundary (written with O_DIRECT)
DIRECT_ALIGN = 4096

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class BlockMeta:
    """What a block says about itself; enough to verify and decode it with no index."""

    namespace: str
    key: str  # digest, hex
    codec: str = "none@1"
    codec_params: dict[str, Any] = field(default_factory=dict)
    raw_len: int = 0
    dtype: str | None = None
    shape: list[int] | None = None
    axes: list[str] | None = None
    created_at: float = 0.0
    tag: str | None = None
    #: keyed tiers only (lifeboatcache_core.integrity): ``hmac-sha256:<key id>:<hex>``; omitted when None,
    #: so blocks of ordinary tiers keep their bytes
    mac: str | None = None

    def to_json(self) -> bytes:
        # a flat dict, not dataclasses.asdict (which deep-copies): this runs once per put
        obj = {name: getattr(self, name) for name in _META_FIELDS}
        if self.mac is not None:
            obj["mac"] = self.mac
        return json.dumps(obj, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | memoryview) -> BlockMeta:
        try:
            obj = json.loads(bytes(raw))
            if not isinstance(obj, dict):
                raise TypeError("meta is not an object")
            return cls(**obj)
        except (ValueError, TypeError) as exc:
            raise CorruptBlockError(f"unreadable meta: {exc}") from None

    @classmethod
    def new(cls, key: BlockKey, raw_len: int, **fields: Any) -> BlockMeta:
        return cls(key.namespace, key.hex, raw_len=raw_len, created_at=time.time(), **fields)


def payload_digest(pieces: Iterable[Buffer]) -> bytes:
    """xxh3_128 over the payload pieces (xxhash releases the GIL on large inputs)."""
    h = xxhash.xxh3_128()
    for piece in pieces:
        h.update(piece)
    return h.digest()


def build_header(meta: BlockMeta, payload_len: int, *, align: int = 8) -> bytes:
    """Fixed header + meta, padded with spaces so the payload starts at a multiple of ``align``."""
    body = meta.to_json()
    header_len = FIXED_LEN + len(body)
    header_len += -header_len % align
    if header_len > MAX_HEADER_LEN:
        raise ValueError(f"block meta too large ({len(body)} bytes)")
    body = body.ljust(header_len - FIXED_LEN, b" ")
    flags = FLAG_ALIGNED if align >= DIRECT_ALIGN else 0
    return FIXED.pack(MAGIC, VERSION, header_len, flags, payload_len, zlib.crc32(body)) + body


def build_trailer(digest: bytes, payload_len: int) -> bytes:
    return TRAILER.pack(digest, payload_len, TRAILER_MAGIC)


def encode_block(meta: BlockMeta, pieces: Sequence[Buffer]) -> list[Buffer]:
    """The whole block as a list of buffers (header, payload pieces, trailer), copy-free."""
    payload_len = sum(memoryview(p).nbytes for p in pieces)
    return [
        build_header(meta, payload_len),
        *pieces,
        build_trailer(payload_digest(pieces), payload_len),
    ]


_META_FIELDS = tuple(f.name for f in fields(BlockMeta) if f.name != "mac")


@dataclass(slots=True)
class Header:
    meta: BlockMeta
    header_len: int
    payload_len: int


def block_length(header_len: int, payload_len: int, flags: int) -> int:
    """Stored size of a block. O_DIRECT writers (FLAG_ALIGNED) leave the file zero-padded to
    4 KiB after the trailer, which saves an ``ftruncate`` per write; readers ignore the pad."""
    n = header_len + payload_len + TRAILER_LEN
    return (n + DIRECT_ALIGN - 1) // DIRECT_ALIGN * DIRECT_ALIGN if flags & FLAG_ALIGNED else n


def parse_fixed(buf: Buffer) -> tuple[int, int, int]:
    """Return (header_len, payload_len, crc) from the first 24 bytes, or raise."""
    if len(buf) < FIXED_LEN:
        raise CorruptBlockError(f"truncated header ({len(buf)} bytes)")
    magic, version, header_len, _flags, payload_len, crc = FIXED.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptBlockError("bad magic")
    if version != VERSION:
        raise CorruptBlockError(f"unsupported block format version {version}")
    if header_len < FIXED_LEN:
        raise CorruptBlockError(f"header_len {header_len} too small")
    return header_len, payload_len, crc


def parse_header(buf: Buffer, total_len: int, key: BlockKey | None = None) -> Header:
    """Validate the header in ``buf`` against a block of ``total_len`` bytes and ``key``.

    ``buf`` must hold at least ``header_len`` bytes (callers read 4 KiB, which always does
    for headers written by this module unless meta is unusually large; see ``header_len``).
    """
    header_len, payload_len, crc = parse_fixed(buf)
    expected = block_length(header_len, payload_len, FIXED.unpack_from(buf, 0)[3])
    if expected != total_len:
        raise CorruptBlockError(
            f"length mismatch: header says {header_len}+{payload_len}+{TRAILER_LEN} ({expected} bytes stored), "
            f"block has {total_len} bytes"
        )
    if len(buf) < header_len:
        raise CorruptBlockError("truncated meta")
    body = memoryview(buf)[FIXED_LEN:header_len]
    if zlib.crc32(body) != crc:
        raise CorruptBlockError("meta crc mismatch")
    meta = BlockMeta.from_json(body)
    if key is not None:
        check_identity(meta, key)
    return Header(meta, header_len, payload_len)


def check_identity(meta: BlockMeta, key: BlockKey) -> None:
    if meta.namespace != key.namespace:
        raise CorruptBlockError(f"foreign namespace {meta.namespace!r}")
    if meta.key != key.hex:
        raise CorruptBlockError("block belongs to another key")


def check_trailer(trailer: Buffer, payload_len: int, payload: Iterable[Buffer]) -> None:
    if len(trailer) != TRAILER_LEN:
        raise CorruptBlockError("truncated trailer")
    digest, length, magic = TRAILER.unpack(bytes(trailer))
    if magic != TRAILER_MAGIC:
        raise CorruptBlockError("bad trailer magic")
    if length != payload_len:
        raise CorruptBlockError("trailer length mismatch")
    if payload_digest(payload) != digest:
        raise CorruptBlockError("payload hash mismatch")


def decode_block(data: Buffer, key: BlockKey | None = None) -> tuple[BlockMeta, memoryview]:
    """Verify a whole block held in memory; return its meta and a view of its payload."""
    view = memoryview(data)
    header = parse_header(view, view.nbytes, key)
    start = header.header_len
    end = start + header.payload_len
    payload = view[start:end]
    check_trailer(view[end:end + TRAILER_LEN], header.payload_len, (payload,))
    return header.meta, payload


def read_block_stream(readinto: Callable[[memoryview], int | None], total_len: int, key: BlockKey | None = None,
                      dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
    """Verify a block read front to back from a stream (an HTTP body, an fsspec file).

    Object stores hand out streams, not seekable files: this reads the header, then the payload
    straight into ``dest`` when it has exactly the payload's length (copy-free, like
    ``FileBackend.read``), then the trailer. ``total_len`` is the block's size as the store
    reports it, which a hostile store can inflate: a payload without a ``dest`` of its size
    is allocated as its bytes arrive (``_STREAM_STEP`` at a time), so memory follows the bytes
    received, never a claimed length. A stream that ends early raises ``OSError`` (a transport
    failure, so the stored block is not quarantined); a block that does not verify raises
    ``CorruptBlockError``.
    """
    if total_len < FIXED_LEN + TRAILER_LEN:
        raise CorruptBlockError(f"truncated block ({total_len} bytes)")
    head = bytearray(FIXED_LEN)
    _fill(readinto, memoryview(head), total_len)
    header_len = parse_fixed(head)[0]
    if header_len > total_len:
        raise CorruptBlockError(f"header_len {header_len} exceeds the block's {total_len} bytes")
    head.extend(bytes(header_len - FIXED_LEN))
    _fill(readinto, memoryview(head)[FIXED_LEN:], total_len)
    header = parse_header(head, total_len, key)
    n = header.payload_len
    payload: Buffer
    if dest is not None and dest.nbytes == n:
        payload = dest
        _fill(readinto, memoryview(payload).cast("B"), total_len)
    else:
        payload = bytearray(min(n, _STREAM_STEP))
        _fill(readinto, memoryview(payload), total_len)
        while len(payload) < n:
            piece = bytearray(min(n - len(payload), _STREAM_STEP))
            _fill(readinto, memoryview(piece), total_len)
            payload += piece
    trailer = bytearray(TRAILER_LEN)
    _fill(readinto, memoryview(trailer), total_len)
    check_trailer(trailer, n, (payload,))
    return header.meta, memoryview(payload)


_STREAM_STEP = 16 * 1024 * 1024


def _fill(readinto: Callable[[memoryview], int | None], view: memoryview, total_len: int) -> None:
    got = 0
    while got < view.nbytes:
        n = readinto(view[got:])
        if not n:
            raise OSError(errno.EIO, f"stream ended {view.nbytes - got} bytes early (block of {total_len} bytes)")
        got += n
