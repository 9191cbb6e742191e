"""Keyed block integrity for shared tiers (``integrity = "keyed"``).

The default check (xxh3_128 in the trailer, crc32 over the meta) catches damage, not intent:
anyone who can write to a shared bucket or NFS export can compute it and plant KV that would
be served. A keyed tier also signs every block with HMAC-SHA256 under a secret key; the tag
covers the meta (namespace, key, codec and its parameters, shape) and the payload, so a block
can neither be forged nor moved to another key or namespace without the key. A block whose
tag is missing, made with an unknown key or wrong reads as a miss and counts as *tampered*.

Two algorithms: HMAC-SHA256 (stdlib, the default) and BLAKE3 in keyed mode (``pip install
blake3``; about 3x faster per core, measured 2.5 vs 0.7 GiB/s on a contended 2-core box).
Reads accept either: the tag names its algorithm, and neither can be forged without the key.

The tag travels in the block's meta (``BlockMeta.mac``), so every backend stores and returns
it without knowing about it; blocks without a tag keep their format byte for byte.

Keys rotate: ``integrity_keys`` lists the accepted keys newest first; writes use the first,
reads accept any (each tag names its key by a short id that reveals nothing of the key).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import struct
from collections.abc import Iterable, Sequence

from lifeboatcache_core.chunkfile import BlockMeta, Buffer
from lifeboatcache_core.errors import CorruptBlockError

ALGORITHM = "hmac-sha256"
ALGORITHMS = ("hmac-sha256", "blake3")
ENV_KEYS = "LIFEBOATCACHE_INTEGRITY_KEYS"
MIN_KEY_CHARS = 16
_KEY_ID_SALT = b"lifeboatcache key id v1\0"
_LEN = struct.Struct("<Q")


class TamperedBlockError(CorruptBlockError):
    """A block of a keyed tier whose tag does not verify under any accepted key."""


def parse_keys(text: str) -> list[str]:
    """Keys from ``$LIFEBOATCACHE_INTEGRITY_KEYS``: comma-separated, newest first."""
    return [k.strip() for k in text.split(",") if k.strip()]


def check_keys(keys: Sequence[str], where: str) -> None:
    """Raise ``ValueError`` (a config error naming the fix) unless ``keys`` can sign blocks."""
    if not keys:
        raise ValueError(
            f'{where}: integrity = "keyed" needs at least one key: set integrity_keys = ["..."] '
            f"or ${ENV_KEYS} (comma-separated, newest first)"
        )
    short = [i for i, k in enumerate(keys) if len(k) < MIN_KEY_CHARS]
    if short:
        raise ValueError(
            f"{where}: integrity key #{short[0] + 1} is shorter than {MIN_KEY_CHARS} characters; "
            "use a random secret, e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`"
        )


def key_id(key: bytes) -> str:
    """8 hex characters naming a key in each tag (a one-way digest: it reveals nothing of the key)."""
    return hashlib.sha256(_KEY_ID_SALT + key).hexdigest()[:8]


class BlockSigner:
    """Signs blocks with the newest key and verifies them against every accepted key."""

    def __init__(self, keys: Sequence[str | bytes], algorithm: str = ALGORITHM) -> None:
        raw = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
        if not raw:
            raise ValueError("BlockSigner needs at least one key")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"integrity algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        if algorithm == "blake3":
            _blake3()  # fail at config time, with the fix
        self.algorithm = algorithm
        self._keys = {key_id(k): k for k in reversed(raw)}  # newest wins an id collision
        self._write_id = key_id(raw[0])

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    def sign(self, meta: BlockMeta, payload: Iterable[Buffer]) -> str:
        """The tag to store in ``meta.mac``: ``hmac-sha256:<key id>:<hex>``."""
        tag = _TAGGERS[self.algorithm](self._keys[self._write_id], meta, payload)
        return f"{self.algorithm}:{self._write_id}:{tag}"

    def verify(self, meta: BlockMeta, payload: Iterable[Buffer]) -> None:
        """Raise ``TamperedBlockError`` unless ``meta.mac`` is a valid tag of this meta and payload."""
        if not meta.mac:
            raise TamperedBlockError("block carries no integrity tag (written without the key)")
        algorithm, _, rest = meta.mac.partition(":")
        kid, _, tag = rest.partition(":")
        tagger = _TAGGERS.get(algorithm)
        if tagger is None:
            raise TamperedBlockError(f"integrity tag uses {algorithm!r}, not one of {', '.join(ALGORITHMS)}")
        key = self._keys.get(kid)
        if key is None:
            raise TamperedBlockError(f"integrity tag made with key {kid!r}, which is not among the accepted keys")
        try:
            expected = tagger(key, meta, payload)
        except ImportError as exc:
            raise TamperedBlockError(f"block signed with {algorithm}, which cannot be checked here: {exc}") from None
        if not hmac.compare_digest(expected, tag):
            raise TamperedBlockError("integrity tag does not match the block")


def _signed_meta(meta: BlockMeta) -> bytes:
    """The meta as stored, without its tag, length-prefixed so meta and payload cannot trade bytes."""
    body = dataclasses.replace(meta, mac=None).to_json()
    return _LEN.pack(len(body)) + body


def _hmac_sha256(key: bytes, meta: BlockMeta, payload: Iterable[Buffer]) -> str:
    mac = hmac.new(key, _signed_meta(meta), hashlib.sha256)
    for piece in payload:  # hashlib releases the GIL on large buffers
        mac.update(piece)
    return mac.hexdigest()


def _blake3_keyed(key: bytes, meta: BlockMeta, payload: Iterable[Buffer]) -> str:
    h = _blake3()(_signed_meta(meta), key=hashlib.sha256(key).digest())  # keyed mode takes exactly 32 bytes
    for piece in payload:
        h.update(piece)
    return h.hexdigest()


def _blake3():  # type: ignore[no-untyped-def]
    try:
        from blake3 import blake3
    except ImportError as exc:
        raise ImportError('integrity_algorithm = "blake3" needs the blake3 package: pip install blake3') from exc
    return blake3


_TAGGERS = {"hmac-sha256": _hmac_sha256, "blake3": _blake3_keyed}


def signer_from_keys(configured: Sequence[str], env_var: str = ENV_KEYS, where: str = "tier",
                     algorithm: str = ALGORITHM) -> BlockSigner:
    """The signer of a keyed tier: configured keys, else ``$env_var``; a ValueError names the fix."""
    keys = list(configured) or parse_keys(os.environ.get(env_var, ""))
    check_keys(keys, where)
    try:
        return BlockSigner(keys, algorithm)
    except ImportError as exc:
        raise ValueError(f"{where}: {exc}") from None
