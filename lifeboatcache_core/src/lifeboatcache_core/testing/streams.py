"""Streams over bytes, as an object store's HTTP body hands them to ``read_block_stream``."""

from __future__ import annotations

from collections.abc import Callable


def byte_stream(data: bytes) -> Callable[[memoryview], int]:
    """A ``readinto`` over ``data`` that ends (returns 0) where ``data`` ends."""
    source = memoryview(data)
    pos = 0

    def readinto(view: memoryview) -> int:
        nonlocal pos
        n = min(len(view), len(source) - pos)
        view[:n] = source[pos:pos + n]
        pos += n
        return n

    return readinto
