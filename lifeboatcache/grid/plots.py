"""PNG plots of a grid: TTFT per round, output throughput, share of prompt tokens from cache."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lifeboatcache.grid.driver import CellResult


def _label(r: CellResult) -> str:
    dram = "" if r.dram_gb is None else f" {r.dram_gb:g}G"
    run = f" #{r.run}" if r.run > 1 else ""
    return f"{r.config}{dram} x{r.agents}{run}"


def write_plots(results: Sequence[CellResult], out_dir: Path) -> list[Path]:
    """Three PNGs under ``out_dir``; cells without a summary are left out."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    done = [r for r in results if r.summary]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in done:
        per_round = {int(k): v for k, v in r.summary["ttft_mean_s_per_round"].items()}  # str keys after JSON
        turns = sorted(per_round)
        ax.plot([t + 1 for t in turns], [per_round[t] for t in turns], marker="o", label=_label(r))
    ax.set(xlabel="round (turn of each session)", ylabel="mean TTFT (s)", title="Time to first token per round")
    if done:  # every cell failed: an empty plot, without matplotlib's empty-legend warning
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(out_dir / "ttft_per_round.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    for key, ylabel, name, scale in (("output_tokens_per_s", "output tokens / s", "throughput.png", 1.0),
                                     ("cache_served_share", "prompt tokens served from cache (%)",
                                      "cache_served.png", 100.0)):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        labels = [_label(r) for r in done]
        values = [(r.summary.get(key) or 0.0) * scale for r in done]
        ax.bar(range(len(done)), values, color=[f"C{i % 10}" for i in range(len(done))])
        ax.set_xticks(range(len(done)), labels, rotation=30, ha="right", fontsize=8)
        ax.set(ylabel=ylabel, title=ylabel)
        ax.grid(axis="y", alpha=0.3)
        paths.append(out_dir / name)
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
