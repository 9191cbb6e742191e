"""``lifeboatcache advise``: how much DRAM and NVMe your own traces need, per eviction policy.

The optimum is the hit fraction of a tier that never evicts (only a block's first reference
misses): no tier size does better. Each policy's hit-rate curve is simulated on a grid of tier
sizes (fractions of the working set, as in ``bench traces``) and the smallest size reaching
80 / 90 / 95 % of the optimum is read off it, interpolated on a log scale between grid points.

Each tier is replayed as a tier config sets it up by default, with its ``keep_prefixes`` guard
(``--no-keep-prefixes`` for tiers that turn it off): the guard alone raises LRU's hit fraction
by 12-22 % at 1-5 % of the working set (30 traces: 0.479 -> 0.587 at 2 %, bench/results 2026-12-07).

Sizes are given in blocks, tokens and GiB (``--kv-bytes-per-token``: 131072 is an 8B Llama with
8 KV heads in bf16). The tiers are laid out as an exclusive stack: DRAM takes up to
``--dram-gib`` of the needed size and NVMe the rest, so their sum is what the curve says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import ReplaySetup, SimResult
from lifeboatcache.sim.sweep import DEFAULT_GPU_BLOCKS, DEFAULT_POLICIES, run_sweep, unlimited_hit_frac
from lifeboatcache.sim.workload import Workload, load_workload

DEFAULT_TARGETS = (0.8, 0.9, 0.95)
DEFAULT_GRID = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)
GIB = 1 << 30


def size_for(curve: Sequence[tuple[int, float]], goal: float) -> int | None:
    """Smallest capacity (blocks) where the curve reaches ``goal``; log-interpolated; None if never."""
    previous: tuple[int, float] | None = None
    for capacity, rate in sorted(curve):
        if rate >= goal:
            if previous is None or rate <= previous[1]:
                return capacity
            lo_cap, lo_rate = previous
            share = (goal - lo_rate) / (rate - lo_rate)
            return math.ceil(math.exp(math.log(lo_cap) + share * (math.log(capacity) - math.log(lo_cap))))
        previous = (capacity, rate)
    return None


def advise(workload: Workload, policies: Sequence[str], grid: Sequence[float], targets: Sequence[float], *,
           gpu_blocks: int, kv_bytes_per_token: int, dram_gib: float, seed: int = 0,
           keep_prefixes: bool = True) -> dict[str, Any]:
    gpu_hits = gpu_prefix_hits(workload, gpu_blocks)
    optimum = unlimited_hit_frac(workload, gpu_hits)
    results: list[SimResult] = run_sweep(workload, policies, grid, gpu_blocks=gpu_blocks, seed=seed,
                                         setup=ReplaySetup(keep_prefixes=keep_prefixes), gpu_hits=gpu_hits)
    block_bytes = workload.block_tokens * kv_bytes_per_token
    rows: list[dict[str, Any]] = []
    for name in policies:
        curve = [(r.capacity_blocks, r.hit_frac) for r in results if r.policy == name]
        for target in targets:
            blocks = size_for(curve, target * optimum)
            row: dict[str, Any] = {"policy": name, "target": target, "goal_hit_frac": round(target * optimum, 4),
                                   "capacity_blocks": blocks}
            if blocks is None:
                row.update(capacity_frac=None, gib=None, dram_gib=None, nvme_gib=None,
                           note=f"not reached within {max(grid)} of the working set; extend --grid")
            else:
                gib = blocks * block_bytes / GIB
                row.update(capacity_frac=round(blocks / workload.working_set, 4),
                           tokens=blocks * workload.block_tokens, gib=round(gib, 2),
                           dram_gib=round(min(gib, dram_gib), 2), nvme_gib=round(max(0.0, gib - dram_gib), 2))
            rows.append(row)
    return {
        "requests": len(workload.blocks),
        "prompt_tokens": workload.total_tokens,
        "working_set_blocks": workload.working_set,
        "working_set_gib": round(workload.working_set * block_bytes / GIB, 2),
        "gpu_blocks": gpu_blocks,
        "kv_bytes_per_token": kv_bytes_per_token,
        "dram_budget_gib": dram_gib,
        "keep_prefixes": keep_prefixes,
        "optimum_hit_frac": round(optimum, 4),
        "curves": {name: [[r.capacity_frac, round(r.hit_frac, 4)] for r in results if r.policy == name]
                   for name in policies},
        "advice": rows,
    }


def register(app: typer.Typer) -> None:
    @app.command("advise")
    def advise_command(
        traces_dir: Path = typer.Option(DEFAULT_TRACES, "--traces", help="kv-cache-tester *.json.gz directory."),
        policy: list[str] = typer.Option(list(DEFAULT_POLICIES), "--policy", help="Registered policy (repeatable)."),
        grid: list[float] = typer.Option(list(DEFAULT_GRID), "--grid", help="Tier sizes to simulate (fractions)."),
        target: list[float] = typer.Option(list(DEFAULT_TARGETS), "--target", help="Share of the optimum."),
        gpu_blocks: int = typer.Option(DEFAULT_GPU_BLOCKS, min=0, help="Engine GPU prefix cache, in blocks."),
        kv_bytes_per_token: int = typer.Option(131072, min=1, help="KV bytes per token of your model."),
        dram_gib: float = typer.Option(64.0, min=0.0, help="Host DRAM you can give the cache; NVMe takes the rest."),
        limit: int | None = typer.Option(None, min=1, help="Only the first N trace files (by name)."),
        seed: int = typer.Option(0, help="Seed of the replay schedule and the policies."),
        keep_prefixes: bool = typer.Option(True, help="Replay the tiers' keep_prefixes guard (a tier config's "
                                           "default); --no-keep-prefixes for tiers that turn it off."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """DRAM and NVMe sizes at which each policy reaches 80/90/95% of the optimal hit rate."""
        try:
            workload = load_workload(traces_dir, seed=seed, limit=limit)
        except (FileNotFoundError, NotADirectoryError) as exc:
            typer.echo(f"cannot read traces: {exc}", err=True)
            raise typer.Exit(2) from None
        report = advise(workload, policy, sorted(grid), target, gpu_blocks=gpu_blocks,
                        kv_bytes_per_token=kv_bytes_per_token, dram_gib=dram_gib, seed=seed,
                        keep_prefixes=keep_prefixes)
        if as_json:
            typer.echo(json.dumps(report, indent=1))
            return
        from rich.console import Console
        from rich.table import Table

        console = Console()
        console.print(f"optimum hit_frac {report['optimum_hit_frac']} (a tier that never evicts); "
                      f"working set {report['working_set_gib']} GiB")
        table = Table("policy", "target", "blocks", "GiB", "DRAM GiB", "NVMe GiB")
        for row in report["advice"]:
            table.add_row(row["policy"], f"{row['target']:.0%}", str(row["capacity_blocks"] or "-"),
                          str(row["gib"] if row["gib"] is not None else "-"),
                          str(row["dram_gib"] if row["dram_gib"] is not None else "-"),
                          str(row["nvme_gib"] if row["nvme_gib"] is not None else "-"))
        console.print(table)
