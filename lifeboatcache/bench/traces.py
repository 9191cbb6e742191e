"""``lifeboatcache bench traces``: eviction policies on the real agent traces, against Bélády.

Replays kv-cache-tester traces (sub-agents as their own streams, conversations started at
seeded offsets in the first hour, then on their own clocks) through the engine's GPU prefix
cache of ``--gpu-blocks`` blocks in front of one lifeboatcache tier sized as a fraction of the
traces' working set (distinct blocks). Per policy and size: prompt tokens served by the engine,
by our tier, recomputed, and ``hit_frac`` = (engine + tier) ÷ all prompt tokens; ``belady`` is
the offline optimum on the same tier. All policies run side by side on one schedule; the rows
over sizes are each policy's hit-rate curve. ``cpu_seconds`` is the CPU time of one run on one
core (not wall time, which other load on the machine inflates).
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from lifeboatcache.bench import emit_json
from lifeboatcache.sim.folds import TUNABLES, run_folds
from lifeboatcache.sim.replay import ReplaySetup, SimResult
from lifeboatcache.sim.sweep import (
    BELADY,
    DEFAULT_FRACTIONS,
    DEFAULT_GPU_BLOCKS,
    DEFAULT_POLICIES,
    gap_closed,
    run_sweep,
)
from lifeboatcache.sim.workload import Workload, load_workload
from lifeboatcache.traces import Conversation, load_traces

DEFAULT_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "kv-cache-tester"


def result_row(result: SimResult) -> dict[str, Any]:
    return {
        "policy": result.policy,
        "capacity_frac": result.capacity_frac,
        "capacity_blocks": result.capacity_blocks,
        "tokens_from_engine": result.tokens_from_engine,
        "tokens_from_tiers": result.tokens_from_tiers,
        "tokens_recomputed": result.tokens_recomputed,
        "hit_frac": round(result.hit_frac, 4),
        "cpu_seconds": round(result.seconds, 2),
    }


def run_traces_bench(workload: Workload, policies: list[str], fractions: list[float], *, gpu_blocks: int,
                     seed: int, setup: ReplaySetup, traces: str, load_seconds: float,
                     progress: bool = False) -> dict[str, Any]:
    """The whole report as one JSON-ready dict."""
    def report(result: SimResult) -> None:
        if progress:
            typer.echo(f"{result.policy:>9} @ {result.capacity_frac}: hit_frac {result.hit_frac:.4f} "
                       f"({result.seconds:.1f} s CPU)", err=True)

    results = run_sweep(workload, policies, fractions, gpu_blocks=gpu_blocks, seed=seed,
                        setup=setup, on_result=report)
    curves: dict[str, list[list[float]]] = {}
    for r in results:
        curves.setdefault(r.policy, []).append([r.capacity_frac or 0.0, round(r.hit_frac, 4)])
    return {
        "traces": traces,
        "requests": len(workload.blocks),
        "prompt_tokens": workload.total_tokens,
        "block_references": workload.references,
        "working_set_blocks": workload.working_set,
        "gpu_blocks": gpu_blocks,
        "seed": seed,
        **asdict(setup),
        "load_seconds": round(load_seconds, 1),
        "host": platform.node(),
        "results": [result_row(r) for r in results],
        "hit_rate_curves": curves,
        "gap_closed": gap_closed(results),
    }


def run_folds_bench(conversations: list[Conversation], policies: list[str], fractions: list[float], *, k: int,
                    gpu_blocks: int, seed: int, setup: ReplaySetup, traces: str,
                    progress: bool = False) -> dict[str, Any]:
    """The cross-validated report (``sim.folds.run_folds``) with the run's settings."""
    def report(fold: int, name: str, result: SimResult) -> None:
        if progress:
            typer.echo(f"fold {fold} {name:>9} @ {result.capacity_frac}: hit_frac {result.hit_frac:.4f} "
                       f"({result.seconds:.1f} s CPU)", err=True)

    started = time.process_time()
    body = run_folds(conversations, policies, fractions, k=k, gpu_blocks=gpu_blocks, seed=seed,
                     setup=setup, on_result=report)
    return {"traces": traces, "conversations": len(conversations), "gpu_blocks": gpu_blocks, "seed": seed,
            **asdict(setup), "host": platform.node(), "tunables": TUNABLES,
            "cpu_seconds": round(time.process_time() - started, 1), **body}


def print_folds_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("capacity", "policy", "pooled hit_frac", "pooled gap closed", "per-fold gap closed")
    for fraction, rows in report["held_out"].items():
        for name, row in rows.items():
            per_fold = row.get("per_fold_gap_closed")
            table.add_row(fraction, name, f"{row['pooled_hit_frac']:.4f}",
                          f"{row['pooled_gap_closed']:+.3f}" if "pooled_gap_closed" in row else "",
                          " ".join(f"{g:+.2f}" for g in per_fold) if per_fold else "")
    console.print(table)
    for name, pick in report["selection"].items():
        console.print(f"{name}: chosen per held fold {pick['chosen_per_held_fold']}; on all folds "
                      f"{pick['chosen_on_all_folds']} (installed default: "
                      f"{'the same' if pick['installed_default_is_chosen'] else 'DIFFERENT'})")


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("policy", "capacity", "blocks", "from engine", "from tiers", "recomputed", "hit_frac", "CPU s")
    total = report["prompt_tokens"] or 1
    for row in report["results"]:
        table.add_row(row["policy"], f"{row['capacity_frac']:.3g}", str(row["capacity_blocks"]),
                      f"{row['tokens_from_engine'] / total:.3f}", f"{row['tokens_from_tiers'] / total:.3f}",
                      f"{row['tokens_recomputed'] / total:.3f}", f"{row['hit_frac']:.4f}", f"{row['cpu_seconds']:.1f}")
    console = Console()
    console.print(table)
    for fraction, closed in report["gap_closed"].items():
        console.print(f"share of the LRU→Bélády gap closed at {fraction}: "
                      + ", ".join(f"{name} {share:+.2f}" for name, share in closed.items()))


def register(app: typer.Typer) -> None:
    @app.command("traces")
    def traces(
        traces_dir: Path = typer.Option(DEFAULT_TRACES, "--traces", help="kv-cache-tester *.json.gz directory."),
        capacity_frac: list[float] = typer.Option(list(DEFAULT_FRACTIONS), "--capacity-frac",
                                                  help="Tier size as a fraction of the working set (repeatable)."),
        policy: list[str] = typer.Option([*DEFAULT_POLICIES, BELADY], "--policy",
                                         help="Registered eviction policy, or 'belady' (repeatable)."),
        gpu_blocks: int = typer.Option(DEFAULT_GPU_BLOCKS, min=0, help="Engine GPU prefix cache, in blocks."),
        seed: int = typer.Option(0, help="Seed of the conversations' start offsets and of the policies."),
        limit: int | None = typer.Option(None, min=1, help="Only the first N trace files (by name)."),
        session_tags: bool = typer.Option(True, help="Hints name the session (else prefix chains only)."),
        request_ends: bool = typer.Option(False, help="Touch each prompt's held blocks at its response's end "
                                          "(the traces' api_time), as vLLM's tier does when a request finishes."),
        keep_prefixes: bool = typer.Option(False, help="The tier's keep_prefixes guard (on in a tier config by "
                                           "default): a session's victim used within the "
                                           "learnt idle limit and not left by its session declines the new block."),
        folds: int = typer.Option(5, "--folds", min=1,
                                  help="K folds of whole conversations: each tunable default is chosen on K-1 "
                                       "and scored on the held one (1: one replay of all traces, no selection)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        out: Path | None = typer.Option(None, help="Also write the JSON report to this file."),
    ) -> None:
        """Hit rate per eviction policy and tier size on real agent traces, with Bélády's optimum."""
        for fraction in capacity_frac:
            if not 0 < fraction:
                raise typer.BadParameter(f"--capacity-frac {fraction} must be > 0 (a fraction of the working set)")
        started = time.perf_counter()
        setup = ReplaySetup(session_tags=session_tags, request_ends=request_ends, keep_prefixes=keep_prefixes)
        if folds > 1:
            try:
                conversations = load_traces(traces_dir, limit=limit)
            except (FileNotFoundError, NotADirectoryError) as exc:
                typer.echo(f"cannot read traces: {exc}", err=True)
                raise typer.Exit(2) from None
            if len(conversations) < folds:
                raise typer.BadParameter(f"--folds {folds} needs at least {folds} conversations, "
                                         f"{traces_dir} has {len(conversations)}")
            report = run_folds_bench(conversations, policy, capacity_frac, k=folds, gpu_blocks=gpu_blocks,
                                     seed=seed, setup=setup, traces=str(traces_dir), progress=not as_json)
            emit_json(report, out, as_json)
            if not as_json:
                print_folds_table(report)
            return
        try:
            workload = load_workload(traces_dir, seed=seed, limit=limit)
        except (FileNotFoundError, NotADirectoryError) as exc:
            typer.echo(f"cannot read traces: {exc}", err=True)
            raise typer.Exit(2) from None
        report = run_traces_bench(workload, policy, capacity_frac, gpu_blocks=gpu_blocks, seed=seed,
                                  setup=setup, traces=str(traces_dir),
                                  load_seconds=time.perf_counter() - started, progress=not as_json)
        emit_json(report, out, as_json)
        if not as_json:
            print_table(report)
