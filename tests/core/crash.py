"""Crash testing: SIGKILL a writer process at random moments, then check what survived.

The writer runs in a ``forkserver`` child (modules preloaded, so each round costs
milliseconds, not an interpreter start) and reports every acknowledged put through a pipe.
After each kill the caller reopens the tier and checks: nothing corrupt is ever served,
``.partial`` files are swept, and (with ``durability = "fsync"``) every acknowledged block
is readable.
"""

from __future__ import annotations

import multiprocessing
import random
import struct
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from lifeboatcache_core.keys import BlockKey

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(["tests.core._crash_preload"])


def crash_payload(seed: int, i: int) -> bytes:
    rng = np.random.default_rng([seed, i])
    return rng.integers(0, 255, size=int(rng.integers(1, 96)) * 1024, dtype=np.uint8).tobytes()


def crash_key(seed: int, i: int) -> BlockKey:
    return BlockKey("crash", seed.to_bytes(4, "big") + i.to_bytes(4, "big") * 7)


def parse_crash_key(key: BlockKey) -> tuple[int, int]:
    return int.from_bytes(key.digest[:4], "big"), int.from_bytes(key.digest[4:8], "big")


def _writer(config: dict[str, Any], seed: int, conn: Connection) -> None:
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.config import load_config_dict

    cache = TieredCache(load_config_dict(config), background_index=False)
    conn.send_bytes(struct.pack("<i", -1))  # ready
    i = 0
    while True:
        if cache.put([crash_key(seed, i)], [crash_payload(seed, i)]) == [True]:
            conn.send_bytes(struct.pack("<i", i))
        i += 1


@dataclass
class CrashRound:
    seed: int
    acknowledged: list[int]


def kill_writer_once(config: dict[str, Any], seed: int, rng: random.Random, max_delay_s: float = 0.005) -> CrashRound:
    """Start a writer, let it acknowledge 0-3 puts and run a random moment more, SIGKILL it.

    Returns what it acknowledged before it died.
    """
    reader, writer = _ctx.Pipe(duplex=False)
    proc = _ctx.Process(target=_writer, args=(config, seed, writer), daemon=True)
    proc.start()
    writer.close()
    acked: list[int] = []
    try:
        try:
            reader.recv_bytes()  # ready
        except EOFError:
            raise RuntimeError(f"crash writer died before it was ready (exit code {proc.exitcode})") from None
        for _ in range(rng.randint(0, 3)):
            acked.append(struct.unpack("<i", reader.recv_bytes())[0])
        time.sleep(rng.uniform(0, max_delay_s))
        proc.kill()  # not os.kill(pid): the forkserver may have reaped it already
        proc.join(10)
        while True:
            try:
                acked.append(struct.unpack("<i", reader.recv_bytes())[0])
            except (EOFError, struct.error):
                break
    finally:
        reader.close()
        if proc.is_alive():
            proc.kill()
    return CrashRound(seed, acked)
