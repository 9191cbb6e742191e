"""Checks of the recovery helpers (``read_header``, ``list_keys``) for the shared-tier backends."""

from __future__ import annotations

import os

import pytest
from lifeboatcache_core.abc import Backend
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.errors import CorruptBlockError
from lifeboatcache_core.testing.contracts import key


class RecoveryHelperChecks:
    """Mix into a ``BackendContract`` subclass that also defines ``damage`` (CorruptionContract)."""

    def test_read_header_matches_the_block(self, backend: Backend) -> None:
        data = os.urandom(9000)
        k = key(40)
        stored = backend.put(k, [data], BlockMeta.new(k, len(data)))
        meta, size = backend.read_header(k)
        assert (meta.key, meta.namespace, meta.raw_len, size) == (k.hex, k.namespace, len(data), stored)
        with pytest.raises(KeyError):
            backend.read_header(key(41))

    def test_read_header_of_a_damaged_header_is_corrupt(self, backend: Backend) -> None:
        k = key(42)
        backend.put(k, [b"h" * 500], BlockMeta.new(k, 500))
        self.damage(backend, k, lambda raw: raw[:30] + bytes([raw[30] ^ 1]) + raw[31:])  # type: ignore[attr-defined]
        with pytest.raises(CorruptBlockError):
            backend.read_header(k)

    def test_list_keys_names_every_block(self, backend: Backend) -> None:
        written = [key(i) for i in range(50, 55)]
        for k in written:
            backend.put(k, [b"l" * 10], BlockMeta.new(k, 10))
        assert sorted(backend.list_keys()) == sorted(written)
