"""Run a grid: for every (DRAM size, agents, configuration) cell a fresh server with empty
caches and tiers, the same sessions replayed, one summary; results saved as the grid goes."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from lifeboatcache.grid.configs import EngineSettings, GridConfig, as_config, server_spec
from lifeboatcache.grid.disk import cell_disk, disk_usage, unmount
from lifeboatcache.grid.server import ServerFailed, VllmServer
from lifeboatcache.grid.tiers import merge_lifeboat, metrics_text, scrape_lifeboat, tier_outcome
from lifeboatcache.loopback import free_port
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.console import replay_with_progress
from lifeboatcache.replay.report import json_safe, round_summary, summarize
from lifeboatcache.replay.runner import ReplayOptions, ReplayResult, merge_results
from lifeboatcache.replay.sessions import Session

#: configurations whose servers do not use a DRAM tier: run once per agent count
DRAM_FREE = ("vllm",)
#: ``--restart-signal`` names: a clean stop, or a crash that flushes nothing
RESTART_SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}


@dataclass
class GridPlan:
    """What a grid runs: its columns (configs) x DRAM sizes x agent counts, and how each cell runs."""

    configs: Sequence[str | GridConfig]
    dram_gb: Sequence[float]
    agents: Sequence[int]
    settings: EngineSettings
    options: ReplayOptions  # agents is overridden per cell
    out_dir: Path
    timeout_s: float = 600.0
    start_timeout_s: float = 900.0
    disk_gb: float | None = None  # each cell's tier directory on its own tmpfs of this size
    restart_after_round: int | None = None  # stop the server after this many rounds, continue on a fresh one
    restart_signal: str = "TERM"  # a key of RESTART_SIGNALS
    repeat: int = 1  # runs of every cell, interleaved (odd runs in column order, even runs reversed)
    sessions_per_agent: int = 1  # sessions each agent runs one after another (sessions_per_agent_count)


@dataclass
class CellResult:
    config: str  # the column's label
    dram_gb: float | None  # None: the configuration has no DRAM tier
    agents: int
    summary: dict
    tier_dir: str
    server_log: str
    error: str | None = None
    root_cause: str | None = None  # the engine's own failure line from its log (see server.root_cause)
    extra: dict = field(default_factory=dict)
    run: int = 1  # which of the plan's ``repeat`` runs (1-based)

    @property
    def failed(self) -> bool:
        """No result, the server failed, or a request failed: the grid then exits non-zero."""
        return bool(self.error or not self.summary or self.summary.get("failed"))

    def to_dict(self) -> dict:
        return {k: json_safe(v) for k, v in self.__dict__.items()}


def cell_dir(out_dir: Path, config: str, dram_gb: float | None, agents: int, run: int = 1) -> Path:
    dram = "na" if dram_gb is None else f"{dram_gb:g}"
    suffix = f"_run{run}" if run > 1 else ""
    return out_dir / "cells" / f"{config.replace(':', '-')}_dram{dram}_agents{agents}{suffix}"


def phases(sessions: Sequence[Session], restart_after_round: int | None) -> list[list[Session]]:
    """The sessions per server: all on one, or rounds ``[0, K)`` then ``[K, N)`` on a fresh one."""
    if not restart_after_round:
        return [list(sessions)]
    halves = [session.split_at_round(restart_after_round) for session in sessions]
    tails = [tail for _, tail in halves if tail.steps]
    return [[head for head, _ in halves]] + ([tails] if tails else [])  # sessions too short: no restart


@dataclass
class _Phase:
    replayed: ReplayResult
    log: Path
    lifeboat: dict | None  # our tier's counters, scraped before the server stopped
    failure: ServerFailed | None = None  # the server died during the replay (its records are kept)


def _serve_phase(plan: GridPlan, config: GridConfig, dram_gb: float, tier_dir: Path, log: Path, agents: int,
                 sessions: list[Session], label: str, stop_signal: signal.Signals, console: Console) -> _Phase:
    """One fresh server on ``tier_dir``: replay ``sessions``, read our tier's metrics, stop it with ``stop_signal``."""
    port = free_port() if config.kind == "lifeboatcache" else None
    spec = server_spec(config, plan.settings, dram_gb, tier_dir, dashboard_port=port)
    if port:  # this cell's processes only: the node-wide spool would merge other servers' samples
        spec = spec.with_env(LIFEBOAT_METRICS_DIR=str(log.parent / f"{log.stem}-metrics"))
    server = VllmServer.for_spec(spec, log, start_timeout_s=plan.start_timeout_s)
    console.print(f"[bold]{label}[/]: starting a fresh server (log {server.log_path})")
    with server:
        endpoint = Endpoint(server.url, plan.settings.served_name, timeout_s=plan.timeout_s)
        options = ReplayOptions(agents=agents, max_tokens=plan.options.max_tokens,
                                think_scale=plan.options.think_scale, token_map=plan.options.token_map)
        replayed = replay_with_progress(sessions, endpoint, options, console, label=label)
        save_request_records(replayed, log.with_name(f"{log.stem}-requests.jsonl"))
        lifeboat = scrape_lifeboat(port) if port else None
        save_engine_metrics(server.url, log.with_name(f"{log.stem}-vllm-metrics.txt"))
        status = server.exited()
        failure = None if status is None else server.failure(f"exited with status {status} during the replay")
        server.stop(sig=stop_signal)
    return _Phase(replayed, log, lifeboat, failure)


def save_request_records(replayed: ReplayResult, path: Path) -> None:
    """Every request of a server's replay, one JSON line each, beside its log, for diagnosis.

    The summary averages a round over its agents; which request of a round was slow, how much
    of its prompt came from cache and when it was sent (seconds on the client's monotonic clock,
    the same clock for every server of a cell) is what tells a queue behind one long prefill
    from a round that missed the cache.
    """
    with path.open("w") as out:
        for record in replayed.records:
            out.write(json.dumps(json_safe(record.to_dict())) + "\n")


def save_engine_metrics(base_url: str, path: Path, timeout_s: float = 10.0) -> None:
    """The engine's whole Prometheus text at the end of a replay, beside its log, for diagnosis.

    The summary keeps only the counters the tables need; the rest (vLLM's tier transfer times,
    allocation failures, skipped stores, lookup delays) is what explains a difference between
    two columns. A server that does not answer leaves no file.
    """
    text = metrics_text(base_url, timeout_s)
    if text is not None:
        path.write_text(text)


def run_cell(plan: GridPlan, config: str | GridConfig, dram_gb: float | None, agents: int,
             sessions: Sequence[Session], console: Console, run: int = 1) -> CellResult:
    """Fresh tier directory (on its own disk with ``disk_gb``), fresh server(s), replay, stop.

    With ``restart_after_round`` K the first server replays rounds [0, K) and is stopped with
    ``restart_signal``; a second one on the same tier directory replays the rest, and the first
    round it serves is also summarized alone (``extra["after_restart"]``). A server that fails
    to start or dies is a failed cell whose error names the engine's root cause.
    """
    config = as_config(config)
    directory = cell_dir(plan.out_dir, config.label, dram_gb, agents, run)
    tier_dir = directory / "tiers"
    if tier_dir.is_mount():  # a grid killed outright (SIGKILL) could not unmount its last cell
        unmount(tier_dir)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    label = f"{config.label} dram={'-' if dram_gb is None else f'{dram_gb:g}G'} agents={agents}"
    if plan.repeat > 1:
        label += f" run {run}/{plan.repeat}"
    result = CellResult(config.label, dram_gb, agents, {}, str(tier_dir), str(directory / "server.log"), run=run)
    done: list[_Phase] = []
    try:
        with cell_disk(tier_dir, plan.disk_gb):
            try:
                parts = phases(sessions, plan.restart_after_round)
                for index, part in enumerate(parts):
                    last = index == len(parts) - 1
                    log = directory / ("server.log" if index == 0 else f"server-{index + 1}.log")
                    stop = signal.SIGTERM if last else RESTART_SIGNALS[plan.restart_signal]
                    what = label if len(parts) == 1 else f"{label} server {index + 1}/{len(parts)}"
                    done.append(_serve_phase(plan, config, dram_gb or 0.0, tier_dir, log, agents, part, what,
                                             stop, console))
                    if done[-1].failure is not None:
                        raise done[-1].failure
            finally:  # what is on the disk at the end, after the last server stopped, before unmounting
                if plan.disk_gb:
                    result.extra["disk"] = {"size_gb": plan.disk_gb, **disk_usage(tier_dir)}
    except ServerFailed as exc:
        lines = str(exc).splitlines()
        result.error, result.root_cause = f"ServerFailed: {lines[0]}", exc.cause
        if exc.cause is None and len(lines) > 1:  # no exception in the log: its last line is the best clue
            result.error += f"; last log line: {lines[-1].strip()}"
    except Exception as exc:  # one broken cell must not lose the grid's other results
        result.error = f"{type(exc).__name__}: {exc}"
    if result.error:
        console.print(f"[red]{label} failed: {result.root_cause or result.error}")
    if done:
        result.summary = summarize(merge_results([p.replayed for p in done]))
        logs = [p.log.read_text(errors="replace") if p.log.exists() else "" for p in done]
        lifeboat = merge_lifeboat([p.lifeboat for p in done])
        result.extra["tier"] = tier_outcome(config.kind, result.summary, logs, lifeboat)
        result.extra["server_logs"] = [str(p.log) for p in done]
    if plan.restart_after_round and len(done) > 1:
        top = {s.session_id for s in sessions}
        first = [r for r in done[1].replayed.records if r.turn == plan.restart_after_round and r.session_id in top]
        # the by-source split comes from the server's counters: the fresh server's whole replay, not one round
        result.extra["after_restart"] = {"round": plan.restart_after_round, "signal": plan.restart_signal,
                                         **round_summary(first),
                                         "fresh_server_cached_tokens_by_source": summarize(done[1].replayed)[
                                             "cached_tokens_by_source"]}
    return result


def run_order(configs: Sequence[GridConfig], run: int) -> list[GridConfig]:
    """Columns in ``run``'s order: as given on odd runs, reversed on even ones (A B, B A, A B, ...).

    A box's load drifts (caches warm, other work starts or ends); alternating the order spreads
    that drift over every column instead of always favouring the one that runs first.
    """
    return list(configs) if run % 2 else list(reversed(configs))


def run_grid(plan: GridPlan, sessions_for: dict[int, list[Session]], console: Console) -> list[CellResult]:
    """Every cell, in order agents -> DRAM -> run -> configuration; ``grid.json`` is rewritten after each."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    configs = [as_config(c) for c in plan.configs]
    results: list[CellResult] = []
    for agents in plan.agents:
        for index, dram_gb in enumerate(plan.dram_gb):
            for run in range(1, plan.repeat + 1):
                for config in run_order(configs, run):
                    if config.kind in DRAM_FREE and index:
                        continue
                    dram = None if config.kind in DRAM_FREE else dram_gb
                    results.append(run_cell(plan, config, dram, agents, sessions_for[agents], console, run))
                    save_results(plan, results)
    return results


def save_results(plan: GridPlan, results: Sequence[CellResult]) -> Path:
    path = plan.out_dir / "grid.json"
    payload = {"settings": plan.settings.__dict__, "configs": [as_config(c).label for c in plan.configs],
               "config_files": {c.label: str(c.source) for c in map(as_config, plan.configs) if c.source},
               "dram_gb": list(plan.dram_gb), "disk_gb": plan.disk_gb,
               "restart_after_round": plan.restart_after_round, "restart_signal": plan.restart_signal,
               "agents": list(plan.agents), "sessions_per_agent": plan.sessions_per_agent, "repeat": plan.repeat,
               "max_tokens": plan.options.max_tokens,
               "tokens_per_block": plan.options.token_map.tokens_per_block,
               "cells": [r.to_dict() for r in results]}
    path.write_text(json.dumps(json_safe(payload), indent=1, default=str))
    return path
