"""Run a grid: for every (DRAM size, agents, configuration) cell a fresh server with empty
caches and tiers, the same sessions replayed, one summary; results saved as the grid goes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from lifeboatcache.grid.configs import EngineSettings, server_spec
from lifeboatcache.grid.server import VllmServer
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.console import replay_with_progress
from lifeboatcache.replay.report import json_safe, summarize
from lifeboatcache.replay.runner import ReplayOptions
from lifeboatcache.replay.sessions import Session

#: configurations whose servers do not use a DRAM tier: run once per agent count
DRAM_FREE = ("vllm",)


@dataclass
class GridPlan:
    configs: Sequence[str]
    dram_gb: Sequence[float]
    agents: Sequence[int]
    settings: EngineSettings
    options: ReplayOptions  # agents is overridden per cell
    out_dir: Path
    timeout_s: float = 600.0
    start_timeout_s: float = 900.0


@dataclass
class CellResult:
    config: str
    dram_gb: float | None  # None: the configuration has no DRAM tier
    agents: int
    summary: dict
    tier_dir: str
    server_log: str
    error: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: json_safe(v) for k, v in self.__dict__.items()}


def cell_dir(out_dir: Path, config: str, dram_gb: float | None, agents: int) -> Path:
    dram = "na" if dram_gb is None else f"{dram_gb:g}"
    return out_dir / "cells" / f"{config}_dram{dram}_agents{agents}"


def run_cell(plan: GridPlan, config: str, dram_gb: float | None, agents: int, sessions: Sequence[Session],
             console: Console) -> CellResult:
    """Fresh tier directory, fresh server, replay, stop. A server that fails to start is a failed cell."""
    directory = cell_dir(plan.out_dir, config, dram_gb, agents)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    spec = server_spec(config, plan.settings, dram_gb or 0.0, directory)
    server = VllmServer(spec, directory / "server.log", start_timeout_s=plan.start_timeout_s)
    label = f"{config} dram={'-' if dram_gb is None else f'{dram_gb:g}G'} agents={agents}"
    console.print(f"[bold]{label}[/]: starting a fresh server (log {server.log_path})")
    result = CellResult(config, dram_gb, agents, {}, str(directory), str(server.log_path))
    try:
        with server:
            endpoint = Endpoint(server.url, plan.settings.served_name, timeout_s=plan.timeout_s)
            options = ReplayOptions(agents=agents, max_tokens=plan.options.max_tokens,
                                    think_scale=plan.options.think_scale, token_map=plan.options.token_map)
            replayed = replay_with_progress(sessions, endpoint, options, console, label=label)
            result.summary = summarize(replayed)
    except Exception as exc:  # one broken cell must not lose the grid's other results
        result.error = f"{type(exc).__name__}: {exc}"
        console.print(f"[red]{label} failed: {result.error}")
    return result


def run_grid(plan: GridPlan, sessions_for: dict[int, list[Session]], console: Console) -> list[CellResult]:
    """Every cell, in order agents -> DRAM -> configuration; ``grid.json`` is rewritten after each."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    results: list[CellResult] = []
    for agents in plan.agents:
        for index, dram_gb in enumerate(plan.dram_gb):
            for config in plan.configs:
                if config in DRAM_FREE and index:
                    continue
                dram = None if config in DRAM_FREE else dram_gb
                results.append(run_cell(plan, config, dram, agents, sessions_for[agents], console))
                save_results(plan, results)
    return results


def save_results(plan: GridPlan, results: Sequence[CellResult]) -> Path:
    path = plan.out_dir / "grid.json"
    payload = {"settings": plan.settings.__dict__, "configs": list(plan.configs), "dram_gb": list(plan.dram_gb),
               "agents": list(plan.agents), "max_tokens": plan.options.max_tokens,
               "tokens_per_block": plan.options.token_map.tokens_per_block,
               "cells": [r.to_dict() for r in results]}
    path.write_text(json.dumps(json_safe(payload), indent=1, default=str))
    return path
