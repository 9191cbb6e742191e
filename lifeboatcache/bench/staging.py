"""``lifeboatcache bench staging``: predictive staging off and on, one run, real agent traces.

The kv-cache-tester traces are replayed against a stack of a small DRAM tier, a file tier and
an S3 tier on the real loopback S3 server (moto) behind the fault proxy shaped like a remote
store (``--latency-ms`` per request, ``--mb-s`` both ways). Each stream (main agent or
sub-agent) is a session; its think times are capped at ``--max-gap-s`` and scaled so the
replay lasts ``--duration-s``. Per request the "engine" loads the leading run of its prompt's
chunks the cache holds (one blocking ``get``), then stores the chunks that missed (with the
session's hints, without waiting). The same schedule runs twice, on fresh tiers: staging off
(no tier has ``stage = true``) and on (DRAM and file tiers ``stage = true``; after each turn
the agent framework hints ``TieredCache.stage(session, eta_s)`` with the time to its next turn
in the trace, and ``release`` after its last). ``--estimate`` replaces the hints by the
eviction policy's own return estimate: every tier runs EpiCache in both runs, nobody hints, and
the stager plans from ``EpiCachePolicy.expected_return`` (the learnt gap of each session).

Reported per run: ``top_share`` (of a returning session's cached leading chunks, the share in
the DRAM tier at arrival), per-request tier load latency p50/p99 (the blocking get) and, for
reference, the same for requests that found every chunk in DRAM (``load_p99_vs_dram_p50``, the
issue's ratio, and ``load_p99_vs_dram_p99``, like for like: on a busy box the all-DRAM loads'
own p99 is several times their p50, so the first ratio cannot reach 1.5 whatever staging does);
staged bytes, used, never used (``waste_share`` = never used / staged) and late arrivals; how far
the replay fell behind its schedule (``lag_p99_s``: a replay that cannot keep up measures a
different workload).
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from lifeboatcache.bench import emit_json
from lifeboatcache.bench.traces import DEFAULT_TRACES

NAMESPACE = "bench-staging"
MB = 1_000_000


@dataclass(frozen=True)
class Turn:
    """One request of the replay: when (seconds from the start), whose, which chunks (prefix ids)."""

    at: float
    session: str
    chunks: tuple[int, ...]
    next_at: float | None  # the session's next turn, None after its last


def build_turns(traces: Path, *, limit: int, requests: int, chunk_blocks: int, duration_s: float,
                max_gap_s: float, seed: int) -> list[Turn]:
    """The first ``requests`` turns of ``limit`` traces, think times capped and scaled to ``duration_s``.

    A chunk is ``chunk_blocks`` consecutive trace blocks, named by its last block's id (the trace's
    ids are prefix-chained, so that id names the whole prefix); a partial last chunk is not cached,
    as an engine does not store one.
    """
    from lifeboatcache.sim.workload import load_workload

    workload = load_workload(traces, seed=seed, limit=limit, spread_s=max_gap_s)
    compressed: list[tuple[float, str, tuple[int, ...]]] = []
    last: dict[str, tuple[float, float]] = {}  # session -> (trace time, replay time) of its previous turn
    for at, session, blocks in sorted(zip(workload.times, workload.streams, workload.blocks, strict=True),
                                      key=lambda item: item[0]):
        prev = last.get(session)
        replay_at = min(at, max_gap_s) if prev is None else prev[1] + min(at - prev[0], max_gap_s)
        last[session] = (at, replay_at)
        chunks = tuple(blocks[chunk_blocks - 1::chunk_blocks])
        if chunks:
            compressed.append((replay_at, session, chunks))
    compressed.sort(key=lambda item: item[0])
    chosen = compressed[:requests]
    if not chosen:
        return []
    start, span = chosen[0][0], (chosen[-1][0] - chosen[0][0]) or 1.0
    scale = duration_s / span
    times = [(at - start) * scale for at, _, _ in chosen]
    following: dict[str, float | None] = {}
    turns: list[Turn] = []
    for i in range(len(chosen) - 1, -1, -1):
        _, session, chunks = chosen[i]
        turns.append(Turn(times[i], session, chunks, following.get(session)))
        following[session] = times[i]
    turns.reverse()
    return turns


def _key(chunk: int) -> Any:
    from lifeboatcache_core.keys import BlockKey

    return BlockKey(NAMESPACE, chunk.to_bytes(8, "big") * 4)


def stack_config(root: Path, *, s3: dict[str, Any], dram_bytes: int, file_bytes: int, staging: bool,
                 policy: str = "lru") -> Any:
    """DRAM → file → S3, write-through, ``policy`` on every tier; ``stage = true`` on DRAM and file when ``staging``.

    keep_prefixes is off on the small DRAM tier: it would keep every active session's head there
    (declining the returning session's chunks), which is what staging decides better with the
    sessions' return times; the file tier keeps its default.
    """
    from lifeboatcache_core.config import GB, load_config_dict

    return load_config_dict({
        "tiers": [
            {"name": "dram", "backend": "dram", "capacity_gb": dram_bytes / GB, "keep_prefixes": False,
             "stage": staging, "io_threads": 4, "policy": policy},
            {"name": "file", "backend": "file", "capacity_gb": file_bytes / GB, "path": str(root / "file"),
             "stage": staging, "io_threads": 4, "policy": policy},
            {"name": "s3", "backend": "s3", "capacity_gb": 1024, "io_threads": 16, "policy": policy, **s3},
        ],
        "fallback_local": {"enabled": False, "path": str(root / "fallback"), "capacity_gb": 1},
    })


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    ordered = sorted(values)
    return {"p50": ordered[len(ordered) // 2], "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


def replay(turns: list[Turn], config: Any, *, block_bytes: int, staging: bool, hints: bool = True,
           stop: threading.Event | None = None) -> dict[str, Any]:
    """Replay ``turns`` on a fresh cache of ``config``; the measurements of one run.

    ``hints``: with staging, the agent framework hints each session's next turn (``stage``) and
    its end (``release``); without, staging has only the policy's estimates to go on.
    """
    from lifeboatcache_core.abc import BlockHint
    from lifeboatcache_core.cache import TieredCache

    stop = stop or threading.Event()
    payload = os.urandom(block_bytes)
    seen: set[str] = set()
    top_hits = cached = 0
    loads: list[float] = []
    dram_loads: list[float] = []
    lags: list[float] = []
    pending: dict[int, Any] = {}
    with TieredCache(config, background_index=False) as cache:
        dram = cache.all_tiers[0]
        started = time.perf_counter()
        for turn in turns:
            delay = turn.at - (time.perf_counter() - started)
            if delay > 0 and stop.wait(delay):
                break
            lags.append(max(0.0, -delay))
            keys = [_key(c) for c in turn.chunks]
            present = cache.presence(keys)
            lead = next((i for i, p in enumerate(present) if p is not True), len(keys))
            in_top = sum(1 for k in keys[:lead] if dram.presence(k) is True)
            if turn.session in seen and lead:
                cached += lead
                top_hits += in_top
            seen.add(turn.session)
            if lead:
                buffers = [bytearray(block_bytes) for _ in range(lead)]
                t0 = time.perf_counter()
                ok = cache.get(keys[:lead], buffers)
                seconds = time.perf_counter() - t0
                loads.append(seconds)
                if in_top == lead:
                    dram_loads.append(seconds)
                lead = next((i for i, hit in enumerate(ok) if not hit), lead)
            new = keys[lead:]
            if new:
                block_hints = [BlockHint(tag=turn.session, parent=keys[lead + i - 1] if lead + i else None,
                                         depth=lead + i) for i in range(len(new))]
                pending[cache.submit_put(new, [payload] * len(new), hints=block_hints)] = new
            for result in cache.poll():
                pending.pop(result.job_id, None)
            if staging and hints:
                now = time.perf_counter() - started
                if turn.next_at is None:
                    cache.release(turn.session)
                else:
                    cache.stage(turn.session, max(0.0, turn.next_at - now))
        for job_id in list(pending):
            try:
                cache.wait(job_id, 60)
            except (KeyError, TimeoutError):
                pass
        snapshot = cache.sample()
        counters = dict(snapshot.counters)
        tiers = {t.name: {"policy": t.policy, "hits": t.counters["hits"], "blocks": t.blocks,
                          "bytes_used": t.bytes_used, "capacity_bytes": t.capacity_bytes} for t in snapshot.tiers}
        replay_s = time.perf_counter() - started
    staged, used = counters["staged_bytes"], counters["staged_used_bytes"]
    never_used = staged - used
    load_q, dram_q = _quantiles(loads), _quantiles(dram_loads)
    return {
        "staging": staging,
        "hints": staging and hints,
        "turns": len(lags),
        "returning_cached_chunks": cached,
        "top_share": round(top_hits / cached, 4) if cached else None,
        "load_p50_s": load_q["p50"], "load_p99_s": load_q["p99"], "loads": len(loads),
        "dram_load_p50_s": dram_q["p50"], "dram_load_p99_s": dram_q["p99"], "dram_loads": len(dram_loads),
        "load_p99_vs_dram_p50": (round(load_q["p99"] / dram_q["p50"], 2)
                                 if load_q["p99"] is not None and dram_q["p50"] else None),
        "load_p99_vs_dram_p99": (round(load_q["p99"] / dram_q["p99"], 2)
                                 if load_q["p99"] is not None and dram_q["p99"] else None),
        "staged_bytes": staged,
        "staged_used_bytes": used,
        "staged_never_used_bytes": never_used,
        "staged_wasted_bytes": counters["staged_wasted_bytes"],
        "waste_share": round(never_used / staged, 4) if staged else None,
        "late_arrivals": counters["staged_late_arrivals"],
        "lag_p50_s": round(statistics.median(lags), 4) if lags else None,
        "lag_p99_s": _quantiles(lags)["p99"],
        "replay_s": round(replay_s, 1),
        "tiers": tiers,
    }


def session_chunks(turns: list[Turn]) -> float:
    """The mean over sessions of each one's largest prompt, in chunks: what "one session" takes."""
    largest: dict[str, int] = {}
    for t in turns:
        largest[t.session] = max(largest.get(t.session, 0), len(t.chunks))
    return statistics.mean(largest.values())


def think_times(turns: list[Turn]) -> list[float]:
    return [t.next_at - t.at for t in turns if t.next_at is not None]


def _replay_on_own_s3(turns: list[Turn], root: Path, *, staging: bool, estimate: bool, block_bytes: int,
                      dram_bytes: int, file_bytes: int, latency_ms: float, mb_s: float) -> dict[str, Any]:
    """One replay on a fresh moto server behind a fresh proxy shaped like a remote store."""
    import boto3

    from lifeboatcache.loopback import FaultProxy, MotoServer

    creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    root.mkdir(parents=True, exist_ok=True)
    moto = MotoServer(root, env=creds)
    proxy = FaultProxy(moto.port).start()
    try:
        proxy.shape(latency_ms / 1000.0, mb_s * MB)
        client = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1",
                              aws_access_key_id="bench", aws_secret_access_key="bench")
        bucket = f"staging-{'on' if staging else 'off'}-{os.getpid()}"
        client.create_bucket(Bucket=bucket)
        s3 = {"url": f"s3://{bucket}/kv", "endpoint_url": f"http://127.0.0.1:{proxy.port}",
              "region": "us-east-1", "access_key_id": "bench", "secret_access_key": "bench",
              "max_pool_connections": 64}
        config = stack_config(root, s3=s3, dram_bytes=dram_bytes, file_bytes=file_bytes, staging=staging,
                              policy="epicache" if estimate else "lru")
        return replay(turns, config, block_bytes=block_bytes, staging=staging, hints=not estimate)
    finally:
        proxy.stop()
        moto.stop()


def run_staging_bench(turns: list[Turn], *, block_bytes: int, dram_sessions: float, file_sessions: float,
                      latency_ms: float, mb_s: float, work: Path, estimate: bool = False) -> dict[str, Any]:
    """Replay with staging off then on, each on an S3 server and shaped proxy of its own; the whole report.

    One server each, so that the two replays differ only in staging: the on replay used to run
    on the server the off replay had filled.
    ``estimate``: EpiCache on every tier in both runs and no hints (the policy's estimate mode).
    """
    distinct = len({c for t in turns for c in t.chunks})
    unit = session_chunks(turns)
    dram_bytes = max(1, int(dram_sessions * unit)) * (block_bytes + 4096) + 8192
    file_bytes = max(1, int(file_sessions * unit)) * (block_bytes + 8192) + 16384
    runs = [_replay_on_own_s3(turns, work / ("on" if staging else "off"), staging=staging, estimate=estimate,
                              block_bytes=block_bytes, dram_bytes=dram_bytes, file_bytes=file_bytes,
                              latency_ms=latency_ms, mb_s=mb_s)
            for staging in (False, True)]
    return {
        "mode": "estimate (epicache, no hints)" if estimate else "hints (lru)",
        "policy": "epicache" if estimate else "lru",
        "dram_sessions": dram_sessions,
        "file_sessions": file_sessions,
        "turns": len(turns),
        "sessions": len({t.session for t in turns}),
        "distinct_chunks": distinct,
        "session_chunks": round(unit, 1),
        "think_p50_s": round(statistics.median(think_times(turns)), 3) if think_times(turns) else None,
        "block_bytes": block_bytes,
        "dram_bytes": dram_bytes,
        "file_bytes": file_bytes,
        "s3_latency_ms": latency_ms,
        "s3_mb_s": mb_s,
        "host": platform.node(),
        "off": runs[0],
        "on": runs[1],
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(value: Any, unit: str = "") -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value * 1000:.2f} ms" if unit == "s" else f"{value:.3f}"
        return f"{value / MB:.1f} MB" if unit == "B" else str(value)

    table = Table("", "staging off", "staging on")
    rows = [("top tier share at arrival", "top_share", ""), ("tier load p50", "load_p50_s", "s"),
            ("tier load p99", "load_p99_s", "s"), ("all-DRAM load p50", "dram_load_p50_s", "s"),
            ("load p99 / all-DRAM p50", "load_p99_vs_dram_p50", ""),
            ("load p99 / all-DRAM p99", "load_p99_vs_dram_p99", ""), ("staged", "staged_bytes", "B"),
            ("staged, used", "staged_used_bytes", "B"), ("staged, never used", "staged_never_used_bytes", "B"),
            ("waste share", "waste_share", ""), ("late arrivals", "late_arrivals", ""),
            ("replay lag p99", "lag_p99_s", "s"), ("turns", "turns", "")]
    for label, name, unit in rows:
        table.add_row(label, fmt(report["off"][name], unit), fmt(report["on"][name], unit))
    console = Console()
    console.print(table)
    console.print(f"mode: {report['mode']}; {report['turns']} turns of {report['sessions']} sessions "
                  f"(think p50 {report['think_p50_s']} s, "
                  f"{report['session_chunks']} chunks each), {report['distinct_chunks']} chunks of "
                  f"{report['block_bytes'] // 1024} KiB; DRAM {report['dram_bytes'] / MB:.1f} MB, file "
                  f"{report['file_bytes'] / MB:.1f} MB, S3 {report['s3_latency_ms']:g} ms + {report['s3_mb_s']:g} MB/s")


def register(app: typer.Typer) -> None:
    @app.command("staging")
    def staging(
        traces_dir: Path = typer.Option(DEFAULT_TRACES, "--traces", help="kv-cache-tester *.json.gz directory."),
        limit: int = typer.Option(10, min=1, help="Trace files (conversations) to replay."),
        requests: int = typer.Option(120, min=2, help="Turns to replay (the earliest, over all sessions)."),
        duration_s: float = typer.Option(90.0, "--duration-s", min=1.0, help="Replay length of each run."),
        max_gap_s: float = typer.Option(300.0, "--max-gap-s", min=1.0,
                                        help="Think times longer than this (trace seconds) are capped first."),
        chunk_blocks: int = typer.Option(32, min=1, help="Trace blocks (64 tokens) per stored chunk."),
        block_kib: int = typer.Option(32, min=1, help="Bytes per chunk, KiB (small: the CPU is the limit here)."),
        dram_sessions: float = typer.Option(2.0, min=0.1, help="DRAM tier size, in sessions (mean largest prompt)."),
        file_sessions: float = typer.Option(4.0, min=0.1, help="File tier size, in sessions."),
        latency_ms: float = typer.Option(20.0, min=0.0, help="S3 proxy: added latency per request."),
        mb_s: float = typer.Option(200.0, min=0.1, help="S3 proxy: bandwidth per request, MB/s."),
        seed: int = typer.Option(0, help="Seed of the conversations' start offsets."),
        estimate: bool = typer.Option(False, "--estimate",
                                      help="No hints: EpiCache on every tier (both runs), staging from its estimate."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path | None = typer.Option(None, help="Also write the JSON report to this file."),
    ) -> None:
        """Predictive staging off vs on: top-tier share at arrival, tier load p50/p99, waste."""
        try:
            turns = build_turns(traces_dir, limit=limit, requests=requests, chunk_blocks=chunk_blocks,
                                duration_s=duration_s, max_gap_s=max_gap_s, seed=seed)
        except (FileNotFoundError, NotADirectoryError) as exc:
            typer.echo(f"cannot read traces: {exc}", err=True)
            raise typer.Exit(2) from None
        if not turns:
            typer.echo("no turns to replay", err=True)
            raise typer.Exit(2)
        with tempfile.TemporaryDirectory(prefix="lifeboat-bench-staging-") as work:
            report = run_staging_bench(turns, block_bytes=block_kib * 1024, dram_sessions=dram_sessions,
                                       file_sessions=file_sessions, latency_ms=latency_ms, mb_s=mb_s, work=Path(work),
                                       estimate=estimate)
        emit_json(report, out, as_json)
        if not as_json:
            print_table(report)
