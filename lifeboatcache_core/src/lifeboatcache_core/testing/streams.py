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


class SteppedPayload:
    """A ``StreamEncoder`` that "codes" ``payload`` into ``out`` ``chunk`` bytes per step, its
    first ``head_len`` bytes written only by the last step (as a codec's piece table is), so a
    backend that writes the head before the payload is whole stores wrong bytes.

    ``fallback``: pieces to store instead (as a codec whose coding did not pay names the raw
    bytes); ``length`` is then None. ``steps`` records each ``step``'s ``stop``.
    """

    def __init__(self, payload: bytes, out: memoryview, *, head_len: int = 0, chunk: int = 65536,
                 fallback: list[bytes] | None = None) -> None:
        if len(out) < len(payload):
            raise ValueError("out is shorter than the payload")
        self.out = out
        self.head_len = min(head_len, len(payload))
        self.finished = False
        self.length: int | None = None
        self.steps: list[int] = []
        self._payload = payload
        self._chunk = chunk
        self._fallback = fallback
        self._pos = self.head_len
        out[: self.head_len] = bytes(self.head_len)  # not yet the head: zeros until the last step

    def step(self, stop: int) -> int:
        self.steps.append(stop)
        while not self.finished and (self._pos < stop or self._pos == self.head_len):
            end = min(self._pos + self._chunk, len(self._payload))
            self.out[self._pos:end] = self._payload[self._pos:end]
            self._pos = end
            if end == len(self._payload):
                self.out[: self.head_len] = self._payload[: self.head_len]
                self.finished = True
                self.length = None if self._fallback is not None else len(self._payload)
        return self._pos

    def result(self) -> tuple[list[bytes] | list[memoryview], dict[str, object]]:
        if not self.finished:
            raise RuntimeError("result before the last step")
        if self._fallback is not None:
            return self._fallback, {"planes": 0}
        return [self.out[: len(self._payload)]], {}
