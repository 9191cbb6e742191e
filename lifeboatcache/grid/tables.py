"""The grid as a Markdown table (for READMEs and issues) and a rich table (for the console)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from lifeboatcache.grid.driver import CellResult
from lifeboatcache.replay.report import summary_row

COLUMNS = ("config", "DRAM GiB", "agents", "requests", "failed", "TTFT mean s", "P50 s", "P99 s", "out tok/s",
           "output tokens", "prompt tokens", "from cache", "wall s", "TTFT vs vllm")


def _baseline(results: Sequence[CellResult], agents: int) -> float | None:
    for r in results:
        if r.config == "vllm" and r.agents == agents and r.summary:
            return r.summary.get("ttft_mean_s")
    return None


def rows(results: Sequence[CellResult]) -> list[list[str]]:
    out = []
    for r in results:
        head = [r.config, "-" if r.dram_gb is None else f"{r.dram_gb:g}", str(r.agents)]
        if not r.summary:
            out.append([*head, "-", "-", f"failed: {r.error}"[:60], *["-"] * (len(COLUMNS) - 6)])
            continue
        base = _baseline(results, r.agents)
        mean = r.summary.get("ttft_mean_s")
        ratio = f"{base / mean:.2f}x faster" if base and mean and r.config != "vllm" else "-"
        out.append([*head, *summary_row(r.summary), ratio])
    return out


def equal_work_notes(results: Sequence[CellResult]) -> list[str]:
    """Cells compared side by side must have served the same requests and output tokens."""
    notes = []
    for agents in sorted({r.agents for r in results}):
        work = {(r.summary["requests"], r.summary["output_tokens"]) for r in results
                if r.agents == agents and r.summary}
        if len(work) > 1:
            notes.append(f"agents={agents}: unequal work across configurations (requests, output tokens): "
                         f"{sorted(work)}; compare with care")
    return notes


def markdown_table(results: Sequence[CellResult]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(results)]
    return "\n".join(lines + [""] + [f"- {note}" for note in equal_work_notes(results)]) + "\n"


def rich_table(results: Sequence[CellResult], title: str = "grid") -> Table:
    table = Table(*COLUMNS, title=title)
    for row in rows(results):
        table.add_row(*row)
    return table
