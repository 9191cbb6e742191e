"""``lifeboatcache bench soak``: does a file tier hold its hit rate, memory and latency for hours?

LMCache's disk tier is reported to slide from 91 % to 47 % hit rate over long runs. This
replays the real agent traces (``../shared/traces/kv-cache-tester``) against one file tier
sized at ``--capacity-fraction`` (5 %) of the traces' working set, so eviction runs the whole
time, and reports per interval (a minute by default): block hit rate, RSS, p99 latency of the
get and put batches, evictions and errors.

Workload (fixed seed, so runs compare): ``--concurrency`` conversations are live at once;
each step replays the next request of a randomly chosen live one, the way an engine sees
interleaved agents. A request looks up its longest stored prefix, reads those blocks (and
checks every byte: a wrong byte is an error), then stores the blocks it missed. A finished
conversation is replaced by the next trace file of a seeded shuffle; after the last file the
traces start over, reshuffled, with fresh block ids (an "epoch"), so the mix stays stationary
for as long as the soak runs.

Why 8 live conversations by default: 8 agents' contexts fit a 5 % tier, so the hit rate is the
traces' own prefix reuse (~96 %) and a slide would be the tier's doing, while each epoch's
fresh blocks keep eviction busy (the tier turns over several times a minute). From ~12 live
long-context agents on, the tier cannot hold them all and a minute's hit rate follows which
long sessions happen to be live (an in-memory LRU on the same stream swings 8-15 points per
minute at 12-32 live), which would hide a slide instead of showing one.
Each block's payload is its id repeated, so verification needs no stored copy. Trace blocks
are 64 tokens; ``--chunk-blocks`` (4: the vLLM adapter's 256-token chunks) groups them into the
blocks actually stored, keyed by the last id of each group (the ids form a hash chain, so the
last one names the whole prefix); a partial tail chunk is not stored, as in vLLM.

Pass criteria (``checks`` in the JSON): after the warm-up intervals, RSS grows < 5 %, every
interval's hit rate is within ±3 points of their mean, and there are zero errors.
"""

from __future__ import annotations

import json
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
from lifeboatcache_backend_file.backend import HEADER_ALIGN
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.chunkfile import TRAILER_LEN, BlockMeta, build_header
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.stats import TierSample

from lifeboatcache.bench import emit_json
from lifeboatcache.traces import BLOCK_TOKENS, CONVERSATION_SHIFT, Conversation, TraceRequest, load_traces

NAMESPACE = "soakbench"
DEFAULT_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "kv-cache-tester"
RSS_GROWTH_LIMIT_PCT = 5.0
HIT_RATE_BAND_POINTS = 3.0
_EPOCH_SHIFT = 52  # above every conversation's ids (CONVERSATION_SHIFT + file index bits)


@dataclass
class Interval:
    """Counters of one reporting interval."""

    lookups: int = 0
    hits: int = 0
    requests: int = 0
    get_s: list[float] = field(default_factory=list)
    put_s: list[float] = field(default_factory=list)
    errors: int = 0

    def report(self, index: int, rss: int, evictions: int) -> dict[str, Any]:
        return {
            "interval": index,
            "requests": self.requests,
            "lookups": self.lookups,
            "hit_rate": round(self.hits / self.lookups, 4) if self.lookups else None,
            "rss_mb": round(rss / 2**20, 1),
            "get_p99_ms": _p99_ms(self.get_s),
            "put_p99_ms": _p99_ms(self.put_s),
            "evictions": evictions,
            "errors": self.errors,
        }


def _p99_ms(samples: list[float]) -> float | None:
    return round(float(np.percentile(samples, 99)) * 1e3, 3) if samples else None


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Workload:
    """Seeded interleaving of live conversations, started in a seeded shuffle, epoch after epoch."""

    def __init__(self, conversations: list[Conversation], concurrency: int, seed: int) -> None:
        # one stream of requests per conversation: its streams (main + sub-agents) merged by time
        self.requests: list[list[TraceRequest]] = [
            sorted((r for s in c.streams for r in s.requests), key=lambda r: r.t) for c in conversations
        ]
        self.requests = [r for r in self.requests if r]
        self.rng = np.random.default_rng(seed)
        self.order = np.arange(len(self.requests))
        self.next_conversation = 0
        self.live: list[tuple[int, int, int]] = []  # (conversation, epoch, next request)
        for _ in range(min(concurrency, len(self.requests))):
            self.live.append(self._start())

    def _start(self) -> tuple[int, int, int]:
        epoch, i = divmod(self.next_conversation, len(self.requests))
        self.next_conversation += 1
        if i == 0:
            self.order = self.rng.permutation(len(self.requests))
        return int(self.order[i]), epoch, 0

    def next_blocks(self, chunk: int = 1) -> np.ndarray:
        """Block ids (unique across conversations and epochs) of the next request, in prompt order,
        one per full ``chunk`` of trace blocks."""
        slot = int(self.rng.integers(len(self.live)))
        conv, epoch, ri = self.live[slot]
        request = self.requests[conv][ri]
        if ri + 1 < len(self.requests[conv]):
            self.live[slot] = (conv, epoch, ri + 1)
        else:
            self.live[slot] = self._start()
        base = (np.int64(epoch) << np.int64(_EPOCH_SHIFT)) | (np.int64(conv) << np.int64(CONVERSATION_SHIFT))
        return request.hash_ids[chunk - 1::chunk] + base


def working_set_blocks(conversations: list[Conversation], chunk: int = 1) -> int:
    ids = [r.hash_ids[chunk - 1::chunk] + (np.int64(ci) << np.int64(CONVERSATION_SHIFT))
           for ci, c in enumerate(conversations) for s in c.streams for r in s.requests]
    return len(np.unique(np.concatenate(ids))) if ids else 0


def stored_block_bytes(block_bytes: int) -> int:
    """Bytes one block takes in a file tier: header and meta, payload, trailer."""
    key = BlockKey(NAMESPACE, (2**62).to_bytes(8, "big"))
    header = build_header(BlockMeta.new(key, block_bytes), block_bytes, align=HEADER_ALIGN)
    return len(header) + block_bytes + TRAILER_LEN


def block_keys(ids: np.ndarray) -> list[BlockKey]:
    raw = ids.astype(">i8").tobytes()
    return [BlockKey.trusted(NAMESPACE, raw[i:i + 8]) for i in range(0, len(raw), 8)]


def payloads(ids: np.ndarray, block_bytes: int) -> np.ndarray:
    """One row per block: the block's id repeated (so any wrong byte is detectable)."""
    return np.repeat(ids[:, None], block_bytes // 8, axis=1)


def _tier_errors(cache: TieredCache) -> int:
    return sum(s["errors"] + s["corrupt_blocks"] + s.get("tampered_blocks", 0) for s in cache.stats().values())


def run(minutes: float, *, traces: Path, limit: int | None, block_bytes: int, capacity_fraction: float,
        concurrency: int, interval_s: float, warmup_intervals: int | None, path: Path | None,
        chunk_blocks: int = 4, seed: int = 0) -> dict[str, Any]:
    if block_bytes % 8:
        raise typer.BadParameter("--block-bytes must be a multiple of 8")
    conversations = load_traces(traces, limit)
    if chunk_blocks < 1:
        raise typer.BadParameter("--chunk-blocks must be at least 1")
    working_set = working_set_blocks(conversations, chunk_blocks)
    capacity_blocks = max(1, int(working_set * capacity_fraction))
    capacity_gb = capacity_blocks * stored_block_bytes(block_bytes) / 1024**3
    workload = Workload(conversations, concurrency, seed)
    root = Path(tempfile.mkdtemp(prefix="lifeboat-soak-", dir=path))
    config = load_config_dict({
        "tiers": [{"name": "nvme", "backend": "file", "path": str(root / "tier"), "capacity_gb": capacity_gb}],
        "fallback_local": {"enabled": False},
    })
    intervals: list[dict[str, Any]] = []
    try:
        with TieredCache(config, background_index=False) as cache:
            def tier() -> TierSample:
                return cache.sample().tiers[0]

            deadline = time.monotonic() + minutes * 60
            while time.monotonic() < deadline:
                current = Interval()
                evictions_before = tier().counters["evictions"]
                errors_before = _tier_errors(cache)
                end = min(deadline, time.monotonic() + interval_s)
                while time.monotonic() < end:
                    _replay_one(cache, workload.next_blocks(chunk_blocks), block_bytes, current)
                current.errors += _tier_errors(cache) - errors_before
                intervals.append(current.report(len(intervals), rss_bytes(),
                                                tier().counters["evictions"] - evictions_before))
            last = tier()
            stored_blocks, stored_bytes = last.blocks, last.bytes_used
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "minutes": minutes,
        "interval_s": interval_s,
        "traces": len(conversations),
        "working_set_blocks": working_set,
        "capacity_blocks": capacity_blocks,
        "capacity_fraction": capacity_fraction,
        "capacity_bytes": config.tiers[0].capacity_bytes,
        "stored_blocks_at_end": stored_blocks,
        "stored_bytes_at_end": stored_bytes,
        "block_bytes": block_bytes,
        "chunk_tokens": chunk_blocks * BLOCK_TOKENS,
        "concurrency": concurrency,
        "epochs_started": workload.next_conversation // max(1, len(workload.requests)),
        "intervals": intervals,
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2)},
    }
    result["checks"] = checks(intervals, warmup_intervals)
    return result


def _replay_one(cache: TieredCache, ids: np.ndarray, block_bytes: int, current: Interval) -> None:
    """Look up the stored prefix, read and verify it, store the rest (an engine's turn)."""
    if not len(ids):
        return
    keys = block_keys(ids)
    hit = cache.contains_prefix(keys)
    current.requests += 1
    current.lookups += len(keys)
    if hit:
        buf = np.empty((hit, block_bytes // 8), np.int64)
        flat = memoryview(buf).cast("B")
        t0 = time.perf_counter()
        ok = cache.get(keys[:hit], [flat[i * block_bytes:(i + 1) * block_bytes] for i in range(hit)])
        current.get_s.append(time.perf_counter() - t0)
        served = np.asarray(ok, bool)
        wrong = served & ~(buf == ids[:hit, None]).all(axis=1)
        current.errors += int(wrong.sum())
        # a block evicted between lookup and read is an honest miss: it ends the prefix
        first_miss = int(np.argmin(served)) if not served.all() else hit
        current.hits += first_miss
        hit = first_miss
    missing = ids[hit:]
    if len(missing):
        data = payloads(missing, block_bytes)
        view = memoryview(data).cast("B")
        t0 = time.perf_counter()
        ok = cache.put(keys[hit:], [view[i * block_bytes:(i + 1) * block_bytes] for i in range(len(missing))])
        current.put_s.append(time.perf_counter() - t0)
        current.errors += ok.count(False)


def checks(intervals: list[dict[str, Any]], warmup_intervals: int | None = None) -> dict[str, Any]:
    """The soak's pass criteria over the intervals after warm-up (default: the first sixth, at least one)."""
    warm = max(1, len(intervals) // 6) if warmup_intervals is None else warmup_intervals
    steady = [i for i in intervals[warm:] if i["hit_rate"] is not None]
    errors = sum(i["errors"] for i in intervals)
    out: dict[str, Any] = {"warmup_intervals": warm, "steady_intervals": len(steady), "errors": errors}
    if not steady:
        out.update(passed=False, reason="no interval after warm-up: run longer or use a shorter --interval")
        return out
    rates = np.array([i["hit_rate"] for i in steady]) * 100
    rss = [i["rss_mb"] for i in steady]
    out["hit_rate_mean_pct"] = round(float(rates.mean()), 2)
    out["hit_rate_max_deviation_points"] = round(float(np.abs(rates - rates.mean()).max()), 2)
    # a slide (LMCache's disk tier: 91 % -> 47 %) is a trend, not noise: points per 10 intervals
    out["hit_rate_trend_points_per_10_intervals"] = (
        round(float(np.polyfit(np.arange(len(rates)), rates, 1)[0]) * 10, 2) if len(rates) > 1 else 0.0)
    out["rss_growth_pct"] = round((rss[-1] - rss[0]) / rss[0] * 100, 2)
    out["passed"] = (errors == 0 and out["rss_growth_pct"] < RSS_GROWTH_LIMIT_PCT
                     and out["hit_rate_max_deviation_points"] <= HIT_RATE_BAND_POINTS)
    return out


def register(app: typer.Typer) -> None:
    @app.command("soak")
    def soak(
        minutes: float = typer.Option(30.0, "--minutes", help="How long to run."),
        traces: Path = typer.Option(DEFAULT_TRACES, "--traces", help="kv-cache-tester trace directory."),
        limit: int | None = typer.Option(None, "--limit", help="Use only the first N trace files."),
        block_bytes: int = typer.Option(4096, "--block-bytes", help="Payload bytes per stored block."),
        chunk_blocks: int = typer.Option(4, "--chunk-blocks", help="64-token trace blocks per stored block."),
        capacity_fraction: float = typer.Option(0.05, "--capacity-fraction",
                                                help="Tier capacity as a fraction of the working set."),
        concurrency: int = typer.Option(8, "--concurrency", help="Conversations live at once."),
        interval_s: float = typer.Option(60.0, "--interval", help="Seconds per reported interval."),
        warmup: int | None = typer.Option(None, "--warmup", help="Intervals left out of the checks."),
        path: Path | None = typer.Option(None, "--path", help="Parent directory of the temporary tier."),
        seed: int = typer.Option(0, "--seed"),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path | None = typer.Option(None, "--out", help="Also write the JSON result to this file."),
    ) -> None:
        """Replay the real traces against a small file tier for N minutes: hit rate, RSS, p99, errors."""
        result = run(minutes, traces=traces, limit=limit, block_bytes=block_bytes,
                     capacity_fraction=capacity_fraction, concurrency=concurrency, interval_s=interval_s,
                     warmup_intervals=warmup, path=path, chunk_blocks=chunk_blocks, seed=seed)
        emit_json(result, out, as_json)
        if not as_json:
            for i in result["intervals"]:
                typer.echo(f"{i['interval']:4d}  hit {i['hit_rate']}  rss {i['rss_mb']} MB  "
                           f"get p99 {i['get_p99_ms']} ms  put p99 {i['put_p99_ms']} ms  errors {i['errors']}")
            typer.echo(json.dumps(result["checks"]))
        if not result["checks"]["passed"]:
            raise typer.Exit(1)
