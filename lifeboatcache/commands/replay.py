"""``lifeboatcache replay``: replay agent sessions against an OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import typer
from rich.console import Console

from lifeboatcache.replay.client import Endpoint, discover_model
from lifeboatcache.replay.console import replay_with_progress
from lifeboatcache.replay.report import failure_lines, json_safe, summarize, summary_table
from lifeboatcache.replay.runner import ReplayOptions
from lifeboatcache.replay.sources import SourceChoice, fits_context, load_sessions, token_map_for_scale
from lifeboatcache.replay.synthetic import SyntheticSpec


async def _discover(base_url: str) -> tuple[str, int | None]:
    async with aiohttp.ClientSession() as http:
        return await discover_model(http, base_url)


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_command(
        url: str = typer.Option("http://127.0.0.1:8000", help="Server root (OpenAI-compatible, /v1/...)."),
        model: str = typer.Option("", help="Model name to request; default: the first one /v1/models lists."),
        traces: Path | None = typer.Option(None, help="kv-cache-tester trace file or directory."),
        lmcache_jsonl: Path | None = typer.Option(None, "--lmcache-jsonl", help="LMCache agentic trace (JSONL)."),
        agents: int = typer.Option(4, "--agents", "-n", min=1, help="Concurrent agents."),
        sessions: int = typer.Option(0, help="Sessions to replay (default: one per agent)."),
        rounds: int = typer.Option(0, help="Max turns per session (0: all)."),
        scale: float = typer.Option(1.0, help="Tokens per 64-token trace block x scale (fits small contexts)."),
        max_tokens: int = typer.Option(32, help="Output tokens per request, same for all (0: the source's own)."),
        think_scale: float = typer.Option(0.0, help="Multiply recorded think times (0: back to back, 1: as traced)."),
        context: int = typer.Option(0, help="Skip sessions whose prompts exceed this many tokens (0: send all)."),
        seed: int = typer.Option(0, help="Seed of the block-id -> token-id map."),
        timeout: float = typer.Option(600.0, help="Per-request timeout in seconds."),
        json_out: Path | None = typer.Option(None, "--json-out", help="Write summary + per-request records here."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of a table."),
    ) -> None:
        """Replay agent sessions turn by turn with N concurrent agents; report TTFT, throughput, cache hits."""
        console = Console(stderr=as_json)
        if traces and lmcache_jsonl:
            raise typer.BadParameter("give --traces or --lmcache-jsonl, not both")
        kind = "kvtrace" if traces else "lmcache" if lmcache_jsonl else "synthetic"
        choice = SourceChoice(kind=kind, path=traces or lmcache_jsonl, sessions=sessions or agents,
                              rounds=rounds or None, synthetic=SyntheticSpec(seed=seed))
        token_map = token_map_for_scale(scale, seed)
        accept = fits_context(token_map, context, max_tokens) if context else None
        picked, refused = load_sessions(choice, accept)
        if refused:
            console.print(f"skipped {len(refused)} session(s) longer than {context} tokens: {', '.join(refused[:5])}")
        if not picked:
            raise typer.BadParameter("no session to replay: lower --scale or --rounds, or raise --context")
        if not model:
            try:
                model, _ = asyncio.run(_discover(url))
            except (aiohttp.ClientError, OSError, RuntimeError) as exc:
                console.print(f"[red]cannot ask {url}/v1/models for the model ({exc}); pass --model")
                raise typer.Exit(2) from exc
        endpoint = Endpoint(url, model, timeout_s=timeout)
        options = ReplayOptions(agents=agents, max_tokens=max_tokens or None, think_scale=think_scale,
                                token_map=token_map)
        result = replay_with_progress(picked, endpoint, options, console, label=f"{kind} x{agents}")
        summary = summarize(result)
        if json_out:
            json_out.write_text(json.dumps({"summary": json_safe(summary),
                                            "records": [r.to_dict() for r in result.records]}, indent=1))
        if as_json:
            typer.echo(json.dumps(json_safe(summary), indent=1))
        else:
            console.print(summary_table({url: summary}))
        for line in failure_lines(summary):
            console.print(f"[yellow]failed: {line}")
