"""S3 tier: one object per block, the same self-describing bytes as the file tier (DESIGN §5).

Layout under ``s3://bucket/prefix/``::

    <namespace>/<ab>/<digest-hex>.lbk        blocks (the 2-hex shard spreads S3 key partitions)
    <namespace>/NAMESPACE.json               human-readable namespace source
    .bad/<namespace>/<digest-hex>.<ns>.lbk   quarantined blocks
    .probe/<host>-<pid>-<rand>               probe objects (deleted at once)

A PUT is atomic in S3 (readers see the whole object or none), and so is a completed multipart
upload, so a writer that dies mid-block leaves nothing visible. Reads stream the body straight
into the caller's buffer; a block larger than ``part_size_mb`` is fetched as ranged GETs in
parallel, each pinned to the first response's ETag so a concurrent rewrite is a miss, never a
mix of two objects. Every S3 or network failure is raised as ``OSError`` (a miss that feeds
tier health); only bytes that fail verification are ``CorruptBlockError``.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions
import xxhash
from lifeboatcache_core.abc import Backend, Outcome, PayloadSink, outcome_of, payload_items, read_items
from lifeboatcache_core.chunkfile import (
    FIXED_LEN,
    TRAILER_LEN,
    BlockMeta,
    Buffer,
    check_trailer,
    encode_block,
    parse_fixed,
    parse_header,
    read_block_stream,
)
from lifeboatcache_core.config import default_cache_dir
from lifeboatcache_core.errors import CorruptBlockError, TierUnavailableError
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import sqlite_url

from lifeboatcache_backend_s3.config import S3Config

log = logging.getLogger("lifeboatcache.s3")

SUFFIX = ".lbk"
HEAD_READ = 4096
_HOST = socket.gethostname()
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
T = TypeVar("T")

# Errors raised by botocore/urllib3 for a request or a body stream that failed in transit.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
    ConnectionError,
    TimeoutError,
)


class S3Error(OSError):
    """An S3 request failed; ``strerror`` is the operator-facing reason, ``code`` S3's error code."""

    def __init__(self, reason: str, code: str = "") -> None:
        super().__init__(errno.EIO, reason)
        self.code = code


def describe_error(exc: BaseException, bucket: str, endpoint: str) -> str:
    """Turn a botocore error into one line an operator can act on (no secrets in it)."""
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        message = err.get("Message") or ""
        if code == "NoSuchBucket":
            return f"bucket {bucket!r} does not exist at {endpoint}: create it or fix `url`"
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
            return f"credentials rejected by {endpoint} ({code}): check the access key/profile for this tier"
        if code in ("AccessDenied", "403"):
            return f"access denied to bucket {bucket!r} at {endpoint}: the credentials lack s3:PutObject/GetObject"
        if code in ("SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "503"):
            return f"{endpoint} is throttling requests (HTTP {status} {code}); retries exhausted"
        return f"{endpoint} answered HTTP {status} {code or 'error'}{': ' + message if message else ''}"
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return ("no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a `profile`, "
                "or an instance role")
    if isinstance(exc, botocore.exceptions.EndpointConnectionError):
        return f"cannot connect to {endpoint}: is the endpoint up and reachable?"
    if isinstance(exc, (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError)):
        return f"{endpoint} did not answer in time ({type(exc).__name__})"
    if isinstance(exc, (botocore.exceptions.ConnectionClosedError, botocore.exceptions.ResponseStreamingError,
                        botocore.exceptions.IncompleteReadError, ConnectionError)):
        return f"connection to {endpoint} was cut: {exc}"
    return f"{endpoint}: {type(exc).__name__}: {exc}"


def _error_code(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


class S3Backend(Backend):
    """Blocks as objects in ``s3://bucket/prefix``; thread-safe (one boto3 client, shared)."""

    persistent = True
    config_model = S3Config

    def __init__(self, config: S3Config, *, tier: str = "s3") -> None:
        super().__init__(config, tier=tier)
        self.config: S3Config = config
        self.bucket = config.bucket
        self.prefix = config.prefix
        self.endpoint = config.endpoint_url or "AWS S3"
        self.client = _make_client(config)
        self._parts = ThreadPoolExecutor(config.parallel_parts, thread_name_prefix=f"lifeboat-{tier}-parts")
        # its own pool: a bulk read of a large block waits on _parts, which must not be the pool it runs in
        self._bulk = ThreadPoolExecutor(config.parallel_requests, thread_name_prefix=f"lifeboat-{tier}-bulk")

    # ------------------------------------------------------------------ names

    def object_name(self, key: BlockKey) -> str:
        h = key.hex
        return f"{self.prefix}{key.namespace}/{h[0:2]}/{h}{SUFFIX}"

    def _parse_name(self, name: str) -> BlockKey | None:
        parts = name[len(self.prefix):].split("/")
        if len(parts) != 3 or not parts[2].endswith(SUFFIX) or parts[0].startswith("."):
            return None
        try:
            return BlockKey.from_hex(parts[0], parts[2][: -len(SUFFIX)])
        except ValueError:
            return None

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        """Run one client call; translate every failure into ``S3Error`` (KeyError for 404)."""
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except TRANSPORT_ERRORS as exc:
            code = _error_code(exc)
            if code in _NOT_FOUND:
                raise KeyError(kwargs.get("Key", what)) from None
            raise S3Error(f"{what}: {describe_error(exc, self.bucket, self.endpoint)}", code) from exc

    # ------------------------------------------------------------------ write

    def put(self, key: BlockKey, payload: Sequence[Buffer], meta: BlockMeta) -> int:
        name = self.object_name(key)
        block = BufferReader(encode_block(meta, payload))  # header, caller's pieces, trailer: no copy
        if block.size >= self.config.multipart_threshold:
            self._put_multipart(name, block)
        else:
            self._call(f"PUT {name}", self.client.put_object, Key=name, Body=block, ContentLength=block.size)
        return block.size

    def _put_multipart(self, name: str, block: BufferReader) -> None:
        """Upload ``block`` in parts, in parallel; abort on any failure so no part lingers."""
        upload = self._call(f"start multipart {name}", self.client.create_multipart_upload, Key=name)
        upload_id = upload["UploadId"]
        size = self.config.part_size
        ranges = [(i + 1, off) for i, off in enumerate(range(0, block.size, size))]

        def send(part: tuple[int, int]) -> dict[str, Any]:
            number, off = part
            body = block.window(off, min(off + size, block.size))
            resp = self._call(f"PUT {name} part {number}", self.client.upload_part, Key=name, UploadId=upload_id,
                              PartNumber=number, Body=body, ContentLength=body.size)
            return {"PartNumber": number, "ETag": resp["ETag"]}

        try:
            parts = list(self._parts.map(send, ranges))
            self._call(f"complete multipart {name}", self.client.complete_multipart_upload, Key=name,
                       UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=name, UploadId=upload_id)
            except TRANSPORT_ERRORS as exc:  # a lifecycle rule cleans up what we could not abort
                log.warning("tier %s: cannot abort multipart upload of %s: %s", self.tier, name,
                            describe_error(exc, self.bucket, self.endpoint))
            raise

    # ------------------------------------------------------------------ read

    def read(self, key: BlockKey, dest: memoryview | None = None) -> tuple[BlockMeta, memoryview]:
        name = self.object_name(key)
        first = self.config.part_size
        try:
            resp = self._call(f"GET {name}", self.client.get_object, Key=name, Range=f"bytes=0-{first - 1}")
        except S3Error as exc:
            if exc.code == "InvalidRange":  # only an empty object has no byte 0
                raise CorruptBlockError("empty object") from None
            raise
        total = _object_size(resp)
        body = resp["Body"]
        try:
            if total <= first:
                return _stream(lambda: read_block_stream(body.readinto, total, key, dest), f"GET {name}", self)
            return _stream(lambda: self._read_large(name, body, resp["ETag"], total, key, dest), f"GET {name}", self)
        finally:
            body.close()

    def _read_large(self, name: str, body: Any, etag: str, total: int, key: BlockKey,
                    dest: memoryview | None) -> tuple[BlockMeta, memoryview]:
        """Header and first part from the open body, the rest as parallel ranged GETs.

        ``total`` and the header's payload length are what the store says: a hostile or broken
        store can claim 1 TiB. So nothing is allocated for a claim: with the caller's ``dest``
        of the payload's size the parts land in place (copy-free); without one the payload
        grows with the bytes received, one window of ``parallel_parts`` parts at a time, and a
        stream that ends early stops the read after that window (``S3Error``).
        """
        head = bytearray(FIXED_LEN)
        _fill(body, memoryview(head))
        header_len = parse_fixed(head)[0]
        if header_len > min(total, self.config.part_size):
            raise CorruptBlockError(f"header_len {header_len} exceeds the first part of the block")
        head.extend(bytes(max(0, header_len - FIXED_LEN)))
        _fill(body, memoryview(head)[FIXED_LEN:])
        header = parse_header(head, total, key)
        n = header.payload_len
        size = self.config.part_size
        first = min(n, size - header_len)
        starts = range(header_len + first, total, size)

        def fetch(start: int, targets: list[memoryview], base: int) -> None:
            end = min(start + size, total)
            resp = self._call(f"GET {name} bytes {start}-{end - 1}", self.client.get_object, Key=name,
                              Range=f"bytes={start}-{end - 1}", IfMatch=etag)
            part_body = resp["Body"]
            try:
                for view in _slices(targets, start - base, end - base):
                    _fill(part_body, view)
            finally:
                part_body.close()

        trailer = bytearray(TRAILER_LEN)
        if dest is not None and dest.nbytes == n:
            payload: Buffer = dest
            # The object from header_len on is payload followed by trailer: two destination views.
            targets = [memoryview(dest).cast("B"), memoryview(trailer)]
            _fill(body, targets[0][:first])
            self._in_windows(starts, lambda start: fetch(start, targets, header_len))
        else:
            grown = bytearray(first)  # the object's bytes from header_len on, as they arrive
            _fill(body, memoryview(grown))
            window = max(1, self.config.parallel_parts)
            for i in range(0, len(starts), window):
                group = starts[i:i + window]
                parts = {start: bytearray(min(start + size, total) - start) for start in group}
                self._in_windows(group, lambda start, parts=parts: fetch(start, [memoryview(parts[start])], start))
                for start in group:
                    grown += parts.pop(start)
            if len(grown) != n + TRAILER_LEN:
                raise CorruptBlockError(f"block has {len(grown)} bytes after its header, expected {n + TRAILER_LEN}")
            trailer[:] = grown[n:]
            del grown[n:]
            payload = grown
        check_trailer(trailer, n, (payload,))
        return header.meta, memoryview(payload)

    def _in_windows(self, starts: Sequence[int], fetch: Callable[[int], None]) -> None:
        """Run ``fetch`` over ``starts`` on the parts pool, ``parallel_parts`` requests at a time;
        the first failure stops what is not yet sent (a cut stream is not asked for 1 TiB more)."""
        window = max(1, self.config.parallel_parts)
        for i in range(0, len(starts), window):
            futures = [self._parts.submit(fetch, start) for start in starts[i:i + window]]
            wait(futures)
            for future in futures:
                future.result()

    # ------------------------------------------------------------------ other ops

    def read_header(self, key: BlockKey) -> tuple[BlockMeta, int]:
        """Meta and stored size from one ranged GET of the first 4 KiB (restart recovery)."""
        name = self.object_name(key)
        try:
            resp = self._call(f"GET {name}", self.client.get_object, Key=name, Range=f"bytes=0-{HEAD_READ - 1}")
        except S3Error as exc:
            if exc.code == "InvalidRange":
                raise CorruptBlockError("empty object") from None
            raise
        total = _object_size(resp)
        body = resp["Body"]
        try:
            head = _stream(body.read, f"GET {name}", self)
        finally:
            body.close()
        header_len = parse_fixed(head)[0]
        if header_len > len(head) and header_len <= total:
            resp = self._call(f"GET {name}", self.client.get_object, Key=name, Range=f"bytes=0-{header_len - 1}")
            head = _stream(resp["Body"].read, f"GET {name}", self)
        return parse_header(head, total, key).meta, total

    def default_manifest_url(self) -> str:
        """A local SQLite manifest per bucket/prefix: restarts need no header GET per block."""
        where = xxhash.xxh3_64_hexdigest(f"{self.endpoint}|{self.bucket}|{self.prefix}".encode())
        directory = default_cache_dir() / "manifests"
        directory.mkdir(parents=True, exist_ok=True)
        return sqlite_url(directory / f"s3-{self.bucket}-{where}.sqlite")

    def exists(self, key: BlockKey) -> bool:
        try:
            self._call("HEAD", self.client.head_object, Key=self.object_name(key))
        except KeyError:
            return False
        return True

    def delete(self, key: BlockKey) -> int:
        """HEAD (for the bytes freed, which ``delete`` reports), then DELETE; ``delete_many`` skips the HEAD."""
        name = self.object_name(key)
        try:
            size = int(self._call(f"HEAD {name}", self.client.head_object, Key=name)["ContentLength"])
        except KeyError:
            return 0
        self._call(f"DELETE {name}", self.client.delete_object, Key=name)
        return size

    # ------------------------------------------------------------------ bulk: one request per key, concurrently

    def _each(self, call: Callable[..., T], items: Sequence[tuple[Any, ...]]) -> list[Outcome[T]]:
        """``call(*item)`` for every item on the bulk pool, outcomes in order (one item runs inline)."""
        if len(items) <= 1:
            return [outcome_of(call, *item) for item in items]
        return list(self._bulk.map(lambda item: outcome_of(call, *item), items))

    def read_many(self, keys: Sequence[BlockKey],
                  dests: Sequence[memoryview | None] | None = None) -> list[Outcome[tuple[BlockMeta, memoryview]]]:
        """Concurrent GETs: a batch costs about one round trip instead of one per block."""
        return self._each(self.read, read_items(keys, dests))

    def read_payload_many(self, keys: Sequence[BlockKey], sinks: Sequence[PayloadSink],
                          stored_sizes: Sequence[int | None]) -> list[Outcome[tuple[BlockMeta, int]]]:
        """Concurrent GETs, each payload handed to its sink (decoded) on the thread that fetched it."""
        return self._each(self.read_payload, payload_items(keys, sinks, stored_sizes))

    def write_many(self, items: Sequence[tuple[BlockKey, Sequence[Buffer], BlockMeta]]) -> list[Outcome[int]]:
        """Concurrent PUTs (each still atomic on its own)."""
        return self._each(self.put, items)

    def delete_many(self, keys: Sequence[BlockKey]) -> list[Exception | None]:
        """Concurrent DELETEs without a HEAD first: S3 answers an absent key like a present one."""
        return self._each(self._delete_object, [(k,) for k in keys])

    def _delete_object(self, key: BlockKey) -> None:
        name = self.object_name(key)
        try:
            self._call(f"DELETE {name}", self.client.delete_object, Key=name)
        except KeyError:  # some S3-compatible stores answer 404 for an absent key: it is gone all the same
            pass

    def quarantine(self, key: BlockKey, reason: str) -> None:
        name = self.object_name(key)
        if self.config.on_corrupt == "quarantine":
            bad = f"{self.prefix}.bad/{key.namespace}/{key.hex}.{secrets.token_hex(4)}{SUFFIX}"
            try:
                self._call(f"COPY {name}", self.client.copy_object, Key=bad,
                           CopySource={"Bucket": self.bucket, "Key": name})
            except KeyError:
                return
        self._call(f"DELETE {name}", self.client.delete_object, Key=name)

    def scan(self) -> Iterator[tuple[BlockKey, int]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        try:
            for page in pages:
                for obj in page.get("Contents", ()):
                    key = self._parse_name(obj["Key"])
                    if key is not None:
                        yield key, int(obj["Size"])
        except TRANSPORT_ERRORS as exc:
            raise S3Error(f"LIST {self.prefix}: {describe_error(exc, self.bucket, self.endpoint)}") from exc

    def describe_namespace(self, namespace: str, info: dict[str, object]) -> None:
        name = f"{self.prefix}{namespace}/NAMESPACE.json"
        try:
            self._call("HEAD", self.client.head_object, Key=name)
        except KeyError:
            body = json.dumps(info, indent=1, sort_keys=True).encode()
            self._call(f"PUT {name}", self.client.put_object, Key=name, Body=body)

    def probe(self) -> None:
        """PUT, GET and DELETE a probe object; the reason names bucket, endpoint and the fix."""
        name = f"{self.prefix}.probe/{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        data = secrets.token_bytes(1024)
        try:
            self._call("probe PUT", self.client.put_object, Key=name, Body=data)
            try:
                body = self._call("probe GET", self.client.get_object, Key=name)["Body"]
                got = _stream(body.read, "probe GET", self)
            finally:
                self._call("probe DELETE", self.client.delete_object, Key=name)
        except KeyError:
            raise TierUnavailableError(
                f"s3://{self.bucket}/{self.prefix}: probe object vanished right after PUT at {self.endpoint}"
            ) from None
        except OSError as exc:
            raise TierUnavailableError(f"s3://{self.bucket}/{self.prefix}: {exc.strerror or exc}") from exc
        if got != data:
            raise TierUnavailableError(f"s3://{self.bucket}/{self.prefix}: probe read back different bytes")

    def close(self) -> None:
        self._bulk.shutdown(wait=True)
        self._parts.shutdown(wait=True)
        self.client.close()


# ----------------------------------------------------------------------------- helpers


class BufferReader(io.RawIOBase):
    """A seekable, read-only file over buffers laid end to end (a window of them), without copying.

    botocore takes bytes or a file-like body; this hands it the block's header, the caller's
    payload pieces and the trailer as they are, and rewinds for a retry.
    """

    def __init__(self, pieces: Sequence[Buffer], start: int = 0, end: int | None = None) -> None:
        super().__init__()
        self._pieces = [memoryview(p).cast("B") for p in pieces]
        total = sum(p.nbytes for p in self._pieces)
        self._start, self._end = start, total if end is None else end
        self.size = self._end - self._start
        self._pos = 0

    def window(self, start: int, end: int) -> BufferReader:
        """Bytes ``[start, end)`` of this reader, as a reader of their own (a multipart part)."""
        return BufferReader(self._pieces, self._start + start, self._start + end)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, min(self.size, base + offset))
        return self._pos

    def readinto(self, buf: Any) -> int:
        out = memoryview(buf).cast("B")
        want = min(out.nbytes, self.size - self._pos)
        done = 0
        for view in _slices(self._pieces, self._start + self._pos, self._start + self._pos + want):
            out[done:done + view.nbytes] = view
            done += view.nbytes
        self._pos += done
        return done

    def __len__(self) -> int:
        return self.size


def _make_client(config: S3Config) -> Any:
    """A boto3 client with bounded retries (standard mode: backoff + jitter) and timeouts.

    Checksums are only sent where S3 requires them: every block carries its own xxh3 hash,
    and several S3-compatible stores (older MinIO, ONTAP S3) reject the newer default ones.
    """
    style = config.addressing_style
    if style == "auto" and config.endpoint_url:
        style = "path"  # custom endpoints (MinIO, ONTAP, moto, IPs) rarely have wildcard DNS
    client_config = botocore.config.Config(
        retries={"total_max_attempts": config.max_attempts, "mode": "standard"},
        connect_timeout=config.connect_timeout_s,
        read_timeout=config.read_timeout_s,
        max_pool_connections=config.max_pool_connections,
        s3={"addressing_style": style},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session(profile_name=config.profile)
    return session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        region_name=config.region,
        aws_access_key_id=config.access_key_id.get_secret_value() if config.access_key_id else None,
        aws_secret_access_key=config.secret_access_key.get_secret_value() if config.secret_access_key else None,
        config=client_config,
    )


def _object_size(resp: dict[str, Any]) -> int:
    """Whole object size from a (ranged) GET: ``Content-Range: bytes a-b/TOTAL``."""
    content_range = resp.get("ContentRange")
    if content_range:
        return int(content_range.rpartition("/")[2])
    return int(resp["ContentLength"])


def _stream(read: Callable[[], T], what: str, backend: S3Backend) -> T:
    """Run a body-reading function; a stream cut in transit becomes ``S3Error``."""
    try:
        return read()
    except TRANSPORT_ERRORS as exc:
        raise S3Error(f"{what}: {describe_error(exc, backend.bucket, backend.endpoint)}") from exc


def _fill(body: Any, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        n = body.readinto(view[got:])
        if not n:
            raise S3Error(f"body ended {view.nbytes - got} bytes early")
        got += n


def _slices(targets: list[memoryview], start: int, end: int) -> Iterator[memoryview]:
    """The parts of ``targets`` (laid end to end) that cover offsets ``[start, end)``."""
    base = 0
    for view in targets:
        lo, hi = max(start, base), min(end, base + view.nbytes)
        if lo < hi:
            yield view[lo - base:hi - base]
        base += view.nbytes
