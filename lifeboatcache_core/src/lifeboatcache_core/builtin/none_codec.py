"""The identity codec: stored bytes are the raw bytes, read straight into the caller's buffer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lifeboatcache_core.abc import Codec, KVLayout
from lifeboatcache_core.chunkfile import Buffer
from lifeboatcache_core.errors import CorruptBlockError


class NoneCodec(Codec):
    name = "none"
    version = 1
    lossless = True
    #: the tier may read the payload directly into the caller's buffer
    identity = True

    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        return [raw], {}

    def decode(self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None, dest: memoryview) -> None:
        if payload.nbytes != dest.nbytes:
            raise CorruptBlockError(f"payload has {payload.nbytes} bytes, expected {dest.nbytes}")
        if payload.obj is not dest.obj:
            dest[:] = payload
