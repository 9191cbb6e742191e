"""Block keys and namespaces (DESIGN §4).

A ``BlockKey`` is the engine's own block hash (``digest``) inside a ``namespace``: a short
stable id of everything that makes KV bytes non-interchangeable. Two engines that agree on
the namespace can share blocks; anything that differs (weights, dtype, layout, rank, ...)
gives a different namespace, so stale or foreign KV can never be served.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, NamedTuple

import xxhash

from lifeboatcache_core.errors import InvalidKeyError

MAX_DIGEST_BYTES = 64
_NAMESPACE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # fullmatch: "$" would accept a trailing newline


class _KeyFields(NamedTuple):
    namespace: str
    digest: bytes


class BlockKey(_KeyFields):
    """One stored block: ``digest`` (the engine's block hash) within ``namespace`` (an id).

    A tuple underneath: hashing and equality run in C, which matters for an index of
    millions of keys (restart recovery builds one per second of budget).
    """

    __slots__ = ()

    def __new__(cls, namespace: str, digest: bytes) -> BlockKey:
        key = super().__new__(cls, namespace, digest)
        check_key(key)
        return key

    @classmethod
    def _make(cls, iterable: Any) -> BlockKey:
        """Validate like the constructor: namedtuple's ``_make``/``_replace`` would bypass ``__new__``,
        and ``TieredCache`` relies on every ``BlockKey`` (except ``trusted`` ones) being checked once."""
        namespace, digest = iterable
        return cls(namespace, digest)

    @classmethod
    def trusted(cls, namespace: str, digest: bytes) -> BlockKey:
        """Build without validation: only for keys read back from our own index or manifest."""
        return tuple.__new__(cls, (namespace, digest))

    @property
    def hex(self) -> str:
        return self.digest.hex()

    @classmethod
    def from_hex(cls, namespace: str, digest_hex: str) -> BlockKey:
        try:
            return cls(namespace, bytes.fromhex(digest_hex))
        except ValueError as exc:
            raise InvalidKeyError(f"digest {digest_hex!r} is not hex") from exc

    def __repr__(self) -> str:
        return f"BlockKey({self.namespace!r}, {self.hex[:16]}…)"


def valid_namespace(namespace: object) -> bool:
    """Whether ``namespace`` is safe as a directory name (the rule ``check_key`` enforces)."""
    return isinstance(namespace, str) and namespace not in (".", "..") and bool(_NAMESPACE_ID.fullmatch(namespace))


def check_key(key: BlockKey, digest_bytes: int | None = None) -> None:
    """Raise ``InvalidKeyError`` unless ``key`` is safe to use as a path and of the right size.

    The namespace becomes a directory name and the digest a file name, so both are checked
    here, once, instead of in every backend.
    """
    if not isinstance(key.namespace, str) or not _NAMESPACE_ID.fullmatch(key.namespace):
        raise InvalidKeyError(
            f"namespace {key.namespace!r} must be 1-64 characters of [A-Za-z0-9_.-]"
        )
    if key.namespace in (".", ".."):
        raise InvalidKeyError(f"namespace {key.namespace!r} is not a valid directory name")
    if not isinstance(key.digest, bytes) or not 1 <= len(key.digest) <= MAX_DIGEST_BYTES:
        raise InvalidKeyError(
            f"digest must be 1-{MAX_DIGEST_BYTES} bytes, got {type(key.digest).__name__} "
            f"of length {len(key.digest) if isinstance(key.digest, bytes) else '?'}"
        )
    if digest_bytes is not None and len(key.digest) != digest_bytes:
        raise InvalidKeyError(
            f"namespace {key.namespace!r} uses {digest_bytes}-byte digests, got {len(key.digest)}"
        )


@dataclass(frozen=True)
class Namespace:
    """Everything that makes stored KV bytes non-interchangeable.

    ``weights_fingerprint`` matters most: engines omit it and silently reuse stale KV after a
    checkpoint swap. ``digest_bytes`` is the length of the engine's block hash, so a key of
    the wrong length is rejected rather than stored under a wrong path.
    """

    engine: str
    model: str
    weights_fingerprint: str = ""
    kv_format: str = "1"
    dtype: str = ""
    layout: str = ""
    block_tokens: int = 0
    rank: int = 0
    world_size: int = 1
    platform: str = ""
    digest_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The human-readable source of the id, stored once beside the blocks."""
        return asdict(self)

    def canonical(self) -> bytes:
        return json.dumps(self.describe(), sort_keys=True, separators=(",", ":")).encode()

    @cached_property
    def id(self) -> str:
        """16 hex characters: stable across processes, Python versions and machines.

        Computed once per namespace (asdict + JSON + hash is far too slow for a per-key call
        on an engine's scheduler thread); the namespace is frozen, so the id cannot go stale.
        ``extra`` is a dict and must not be changed in place either (``for_tenant`` copies it).
        """
        return xxhash.xxh3_64_hexdigest(self.canonical())

    def for_tenant(self, salt: str | bytes | None) -> Namespace:
        """This namespace for one tenant: a per-request salt (vLLM/LMCache ``cache_salt``, SGLang
        extra keys) becomes part of the id, so one tenant's blocks are never served to another.

        Only a digest of the salt is kept (``extra["tenant"]``): namespaces are described in
        clear beside the blocks, and a salt is a secret that must not leak into a shared tier.
        No salt (None or empty) returns the namespace unchanged, so unsalted requests share.
        """
        if not salt:
            return self
        raw = salt.encode() if isinstance(salt, str) else bytes(salt)
        tenant = hashlib.sha256(b"lifeboatcache tenant v1\0" + raw).hexdigest()[:32]
        return replace(self, extra={**self.extra, "tenant": tenant})

    def key(self, digest: bytes) -> BlockKey:
        """The key of ``digest`` in this namespace, checked once (the id is always a valid name)."""
        key = BlockKey.trusted(self.id, digest)
        check_key(key, self.digest_bytes)
        return key
