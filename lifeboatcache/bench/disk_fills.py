"""``lifeboatcache bench disk-fills``: what a codec setting buys on a disk that fills, and costs on one that does not.

A codec makes a disk hold more KV, so more of a returning session comes back, but every load of a
block then decodes it. Which wins depends on whether the disk fills, so this runs both cells, each
with every setting side by side:

- **fills**: one file tier per setting at ``--capacity-fraction`` of the traces' working set;
- **never fills**: the same at ``--room`` times the bytes the cell stores (nothing is evicted).

A setting is ``CODEC`` (that codec on every block) or ``CODEC@FILL`` (``codec_from_fill = FILL``: raw
while the tier is filled less than that share, then coded, the raw blocks re-encoded in place).

Workload: the real agent traces (``../shared/traces/kv-cache-tester``) as ``bench soak`` interleaves
them (``--concurrency`` live conversations, a fixed seed, 256-token chunks). Every setting gets the
same requests in lockstep, the order of the settings rotating per request, so none always goes first
on a noisy box. A request reads the longest prefix its tier holds, then stores the rest with the
hints vLLM's tier gives (session tag, depth in the prompt), so ``keep_prefixes`` acts as under vLLM.

Each stored block is real SmolLM2-135M bf16 KV: 32 tokens x 2 layers of the KV of ``--context``
tokens of the GPL-3 text (the statistics a codec sees, at a size a replay of 120k-token agent
prompts can move on a small box), the block's id stamped over its first 8 bytes, so every byte read
is checked. The files were just written, so loads read the page cache: the cost of decoding shows in
full, as in ``bench returning``.

Reported per cell and setting: block hit rate over the second half of the requests (after the tier
has filled), load seconds and logical GB/s (raw KV bytes served per second of ``get``), stored bytes
per raw byte at the end, blocks compacted, evictions, declines and errors.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import typer
from lifeboatcache_core.abc import BlockHint, KVLayout
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey

from lifeboatcache.bench import emit_json, parse_codec_setting
from lifeboatcache.bench.soak import DEFAULT_TRACES, Workload, block_keys, working_set_blocks
from lifeboatcache.traces import BLOCK_TOKENS, CONVERSATION_SHIFT, load_traces

DEFAULT_SETTINGS = "none,lossless,lossless@0.8"
#: KV each stored block carries: (kv, layer, token, head, dim) of SmolLM2-135M
BLOCK_LAYERS, BLOCK_TOKENS_KV = 2, 32
AXES = ("kv", "layer", "token", "head", "dim")
CHUNK_BLOCKS = 4  # 64-token trace blocks per stored block: vLLM's 256-token chunks


@dataclass(frozen=True)
class Setting:
    """One tier configuration under test."""

    name: str
    codec: str
    codec_from_fill: float

    @classmethod
    def parse(cls, text: str) -> Setting:
        codec, fill = parse_codec_setting(text)
        return cls(text.strip(), codec, fill)


@dataclass
class Tally:
    """One setting's counts in one cell."""

    lookups: int = 0
    hits: int = 0
    late_lookups: int = 0  # second half of the requests
    late_hits: int = 0
    load_s: float = 0.0
    loaded_bytes: int = 0
    errors: int = 0
    load_per_request: list[float] = field(default_factory=list)


class KVTemplates:
    """Real KV blocks to store: block ``id`` carries template ``id % n`` with the id over its first 8 bytes."""

    def __init__(self, context: int) -> None:
        from lifeboatcache.bench.codecs import _default_text, smollm2_scorer

        exact = smollm2_scorer(_default_text(), context, 1).exact  # (kv, layer, token, head, dim) bf16
        layers, tokens = exact.shape[1], exact.shape[2]
        windows = [exact[:, layer:layer + BLOCK_LAYERS, token:token + BLOCK_TOKENS_KV]
                   for layer in range(0, layers - BLOCK_LAYERS + 1, BLOCK_LAYERS)
                   for token in range(0, tokens - BLOCK_TOKENS_KV + 1, BLOCK_TOKENS_KV)]
        if not windows:
            raise typer.BadParameter(f"--context must be at least {BLOCK_TOKENS_KV} tokens")
        self.layout = KVLayout("bfloat16", tuple(windows[0].shape), AXES)
        self.rows = np.stack([np.ascontiguousarray(w).view(np.uint8).reshape(-1) for w in windows])
        self.block_bytes = self.rows.shape[1]

    def blocks(self, ids: np.ndarray) -> np.ndarray:
        """One row per id: its template, stamped."""
        out = self.rows[ids % len(self.rows)]
        out[:, :8] = ids.astype("<i8").view(np.uint8).reshape(-1, 8)
        return out

    def wrong(self, ids: np.ndarray, got: np.ndarray) -> np.ndarray:
        """Which rows of ``got`` are not the blocks of ``ids``."""
        return ~(got == self.blocks(ids)).all(axis=1)


def open_tier(root: Path, setting: Setting, capacity_bytes: int) -> TieredCache:
    tier = {"name": "nvme", "backend": "file", "path": str(root), "capacity_gb": capacity_bytes / 1024**3,
            "codec": setting.codec, "codec_from_fill": setting.codec_from_fill}
    return TieredCache(load_config_dict({"tiers": [tier], "fallback_local": {"enabled": False}}),
                       background_index=False)


def replay_request(cache: TieredCache, ids: np.ndarray, tag: str, kv: KVTemplates, tally: Tally,
                   late: bool) -> None:
    """Read the stored prefix (every byte checked), store the rest: an engine's turn."""
    keys: list[BlockKey] = block_keys(ids)
    hit = cache.contains_prefix(keys)
    if hit:
        buf = np.empty((hit, kv.block_bytes), np.uint8)
        flat = memoryview(buf).cast("B")
        started = time.perf_counter()
        ok = cache.get(keys[:hit], [flat[i * kv.block_bytes:(i + 1) * kv.block_bytes] for i in range(hit)])
        seconds = time.perf_counter() - started
        served = np.asarray(ok, bool)
        tally.errors += int((served & kv.wrong(ids[:hit], buf)).sum())
        hit = int(np.argmin(served)) if not served.all() else hit  # evicted after the lookup: a miss
        tally.load_s += seconds
        tally.loaded_bytes += int(served.sum()) * kv.block_bytes
        tally.load_per_request.append(seconds)
    tally.lookups += len(keys)
    tally.hits += hit
    if late:
        tally.late_lookups += len(keys)
        tally.late_hits += hit
    if hit < len(keys):
        rows = kv.blocks(ids[hit:])
        view = memoryview(rows).cast("B")
        hints = [BlockHint(tag=tag, parent=keys[d - 1] if d else None, depth=d) for d in range(hit, len(keys))]
        # a put a full tier declines (keep_prefixes) is no error: errors are wrong bytes and the tier's own counts
        cache.put(keys[hit:], [view[i * kv.block_bytes:(i + 1) * kv.block_bytes] for i in range(len(rows))],
                  layout=kv.layout, hints=hints)


def cell(settings: list[Setting], requests: list[tuple[np.ndarray, str]], kv: KVTemplates, capacity_bytes: int,
         parent: Path | None) -> dict[str, Any]:
    """Replay ``requests`` against one tier per setting, in lockstep; the per-setting results."""
    root = Path(tempfile.mkdtemp(prefix="lifeboat-disk-fills-", dir=parent))
    caches = [open_tier(root / f"t{i}", s, capacity_bytes) for i, s in enumerate(settings)]
    tallies = [Tally() for _ in settings]
    try:
        half = len(requests) // 2
        for n, (ids, tag) in enumerate(requests):
            for j in range(len(settings)):
                k = (n + j) % len(settings)
                replay_request(caches[k], ids, tag, kv, tallies[k], n >= half)
        for cache in caches:
            cache.drain()
        results = {}
        for setting, cache, tally in zip(settings, caches, tallies, strict=True):
            sample = cache.sample().tiers[0]
            counters = sample.counters
            raw_held = sample.blocks * kv.block_bytes
            loads = np.array(tally.load_per_request) if tally.load_per_request else np.zeros(1)
            results[setting.name] = {
                "codec": setting.codec, "codec_from_fill": setting.codec_from_fill,
                "hit_rate": round(tally.hits / max(1, tally.lookups), 4),
                "hit_rate_second_half": round(tally.late_hits / max(1, tally.late_lookups), 4),
                "load_s": round(tally.load_s, 3),
                "load_GBps": round(tally.loaded_bytes / tally.load_s / 1e9, 3) if tally.load_s else None,
                "load_p50_ms": round(float(np.percentile(loads, 50)) * 1e3, 3),
                "load_p99_ms": round(float(np.percentile(loads, 99)) * 1e3, 3),
                "blocks_at_end": sample.blocks,
                "stored_per_raw_at_end": round(sample.bytes_used / raw_held, 4) if raw_held else None,
                "compacted": counters["compacted"], "evictions": counters["evictions"],
                "declined": counters["declined"],
                "errors": tally.errors + counters["errors"] + counters["corrupt_blocks"],
            }
        return results
    finally:
        for cache in caches:
            cache.close()
        shutil.rmtree(root, ignore_errors=True)


def run(*, settings: list[Setting], traces: Path, limit: int | None, requests: int, concurrency: int,
        capacity_fraction: float, room: float, context: int, seed: int, path: Path | None) -> dict[str, Any]:
    conversations = load_traces(traces, limit)
    working_set = working_set_blocks(conversations, CHUNK_BLOCKS)
    workload = Workload(conversations, concurrency, seed)
    stream: list[tuple[np.ndarray, str]] = []
    for _ in range(requests):
        ids = workload.next_blocks(CHUNK_BLOCKS)
        stream.append((ids, f"c{int(ids[0]) >> CONVERSATION_SHIFT if len(ids) else 0}"))
    kv = KVTemplates(context)
    stored_block = kv.block_bytes + 4096 + 64  # a raw block and its file's header, meta and trailer
    fills_capacity = int(working_set * capacity_fraction) * stored_block
    distinct = len(np.unique(np.concatenate([ids for ids, _ in stream]))) if stream else 0
    never_capacity = int(distinct * stored_block * room)
    load0 = os.getloadavg()[0]
    started = time.monotonic()
    cells = {
        "fills": {"capacity_bytes": fills_capacity, "settings": cell(settings, stream, kv, fills_capacity, path)},
        "never_fills": {"capacity_bytes": never_capacity,
                        "settings": cell(settings, stream, kv, never_capacity, path)},
    }
    return {
        "requests": requests, "concurrency": concurrency, "traces": len(conversations), "seed": seed,
        "working_set_blocks": working_set, "distinct_blocks_requested": distinct,
        "capacity_fraction": capacity_fraction, "room": room,
        "block_bytes": kv.block_bytes, "block_kv": f"{BLOCK_TOKENS_KV} tokens x {BLOCK_LAYERS} layers, bf16",
        "chunk_tokens": CHUNK_BLOCKS * BLOCK_TOKENS, "cells": cells,
        "seconds": round(time.monotonic() - started, 1),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m_at_start": round(load0, 2), "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
    }


def register(app: typer.Typer) -> None:
    @app.command("disk-fills")
    def disk_fills(
        settings: str = typer.Option(DEFAULT_SETTINGS, "--settings",
                                     help="Comma-separated CODEC or CODEC@FILL (codec_from_fill) settings."),
        traces: Path = typer.Option(DEFAULT_TRACES, "--traces", help="kv-cache-tester trace directory."),
        limit: int | None = typer.Option(None, "--limit", help="Use only the first N trace files."),
        requests: int = typer.Option(800, "--requests", help="Requests replayed per cell (each setting all)."),
        concurrency: int = typer.Option(16, "--concurrency", help="Conversations live at once."),
        capacity_fraction: float = typer.Option(0.05, "--capacity-fraction",
                                                help="The filling cell's tier: this share of the working set."),
        room: float = typer.Option(1.5, "--room",
                                   help="The never-filling cell's tier: this many times what it stores."),
        context: int = typer.Option(2048, "--context", help="Tokens of text whose KV the blocks carry."),
        seed: int = typer.Option(0, "--seed"),
        path: Path | None = typer.Option(None, "--path", help="Parent directory of the temporary tiers."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path | None = typer.Option(None, "--out", help="Also write the JSON result to this file."),
    ) -> None:
        """A codec setting on a disk that fills and one that does not: hit rate, load GB/s, stored bytes."""
        parsed = [Setting.parse(s) for s in settings.split(",") if s.strip()]
        if not parsed:
            raise typer.BadParameter("--settings names no setting")
        if not 0 < capacity_fraction < 1 or room < 1:
            raise typer.BadParameter("--capacity-fraction must be in (0, 1) and --room at least 1")
        result = run(settings=parsed, traces=traces, limit=limit, requests=requests, concurrency=concurrency,
                     capacity_fraction=capacity_fraction, room=room, context=context, seed=seed, path=path)
        emit_json(result, out, as_json)
        if not as_json:
            for name, cell_result in result["cells"].items():
                typer.echo(f"{name} (capacity {cell_result['capacity_bytes'] / 1e6:.0f} MB)")
                for setting, r in cell_result["settings"].items():
                    typer.echo(f"  {setting:18s} hit {r['hit_rate_second_half']:.4f}  load {r['load_GBps']} GB/s  "
                               f"p50 {r['load_p50_ms']} ms  stored/raw {r['stored_per_raw_at_end']}  "
                               f"compacted {r['compacted']}  evictions {r['evictions']}  errors {r['errors']}")
