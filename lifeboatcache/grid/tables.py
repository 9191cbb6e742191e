"""The grid as Markdown tables (for READMEs and issues) and rich tables (for the console).

The main table compares the columns on equal work; the second says what each tier below the
CPU tier did (with ``--disk-gb``: on a disk that fills up) and, with ``--restart-after-round``,
how the first round on the fresh server went. Footnotes say what each number means.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from rich.table import Table

from lifeboatcache.grid.driver import CellResult
from lifeboatcache.replay.report import SOURCES_NOTE, format_seconds, format_share, format_tokens, summary_row

COLUMNS = ("config", "DRAM GiB", "agents", "requests", "failed", "TTFT mean s", "P50 s", "P99 s", "out tok/s",
           "output tokens", "prompt tokens", "from cache", "wall s", "device / CPU / below", "last third",
           "TTFT vs vllm")
TIER_COLUMNS = ("config", "DRAM GiB", "agents", "disk GiB", "disk used", "stores refused", "store errors",
                "evictions", "kept serving", "restart", "TTFT after", "from cache after")
LAST_THIRD_NOTE = ("last third: prompt tokens from cache (usage-reported) over the last third of the rounds, "
                   "where a bounded disk has filled up; compare it across columns.")
TIER_NOTE = (
    "tiers: vllm-fs store errors = 'block I/O failed' lines in the server logs (vLLM's fs tier logs one per "
    "failed block job and never evicts); lifeboatcache figures are its own counters (lifeboatcache_* on its "
    "/metrics, summed over the cell's servers): store errors = I/O errors, evictions = blocks evicted for "
    "capacity, stores refused = blocks offered minus blocks stored in the bottom tier (a full or down tier "
    "skips stores). disk used = df of the cell's tier filesystem after its last server stopped. "
    "kept serving = no request failed. after = the first round each session sent to the restarted server.")
FAILED_CELL_CHARS = 120


def _baseline(results: Sequence[CellResult], agents: int) -> float | None:
    for r in results:
        if r.config == "vllm" and r.agents == agents and r.summary:
            return r.summary.get("ttft_mean_s")
    return None


def _head(r: CellResult) -> list[str]:
    config = f"{r.config} #{r.run}" if r.run > 1 else r.config
    return [config, "-" if r.dram_gb is None else f"{r.dram_gb:g}", str(r.agents)]


def sources_cell(summary: dict) -> str:
    """``device / CPU / below`` shares of the prompt tokens, ``? n`` for unattributed hits."""
    sources, prompt = summary.get("cached_tokens_by_source"), summary.get("prompt_tokens")
    if not sources or not prompt:
        return "-"
    text = " / ".join(format_share(sources[k] / prompt) for k in ("device", "cpu", "below"))
    return text + (f" (? {format_share(sources['unattributed'] / prompt)})" if sources.get("unattributed") else "")


def rows(results: Sequence[CellResult]) -> list[list[str]]:
    out = []
    for r in results:
        if not r.summary:
            reason = f"failed: {r.root_cause or r.error}"[:FAILED_CELL_CHARS]
            out.append([*_head(r), "-", reason, *["-"] * (len(COLUMNS) - 5)])
            continue
        base = _baseline(results, r.agents)
        mean = r.summary.get("ttft_mean_s")
        ratio = f"{base / mean:.2f}x faster" if base and mean and r.config != "vllm" else "-"
        failed = str(r.summary["failed"]) + (f" ({r.root_cause})"[:FAILED_CELL_CHARS] if r.root_cause else "")
        row = summary_row(r.summary)
        row[1] = failed
        out.append([*_head(r), *row, sources_cell(r.summary),
                    format_share(r.summary.get("cache_served_share_last_third")), ratio])
    return out


def tier_rows(results: Sequence[CellResult]) -> list[list[str]]:
    out = []
    for r in results:
        tier, disk, after = r.extra.get("tier") or {}, r.extra.get("disk") or {}, r.extra.get("after_restart")
        used = f"{disk['used_bytes'] / 2**20:,.1f} MiB" if disk else "-"
        serving = ("yes" if tier.get("kept_serving") else "NO") if tier else "-"
        restart = f"after round {after['round']} ({after['signal']})" if after else "-"
        out.append([*_head(r), f"{disk['size_gb']:g}" if disk else "-", used,
                    format_tokens(tier.get("stores_refused")), format_tokens(tier.get("store_errors")),
                    format_tokens(tier.get("evictions")), serving,
                    restart, format_seconds(after["ttft_mean_s"]) if after else "-",
                    format_share(after["cache_served_share"]) if after else "-"])
    return out


MEDIAN_COLUMNS = ("config", "DRAM GiB", "agents", "runs", "TTFT mean s: median (every run)",
                  "out tok/s: median (every run)", "from cache", "last third", "TTFT vs vllm-fs", "tok/s vs vllm-fs")
MEDIAN_NOTE = ("medians: each column's cells over its interleaved runs (--repeat; odd runs in column order, even "
               "runs reversed); 'vs vllm-fs' compares medians in the same DRAM size and agent count: TTFT as "
               "vllm-fs / this (above 1 = faster than vLLM's own offloading), tok/s as this / vllm-fs.")


def _median(results: Sequence[CellResult], key: str) -> float | None:
    values = [r.summary[key] for r in results if r.summary and r.summary.get(key) is not None]
    return statistics.median(values) if values else None


def _runs(results: Sequence[CellResult], key: str, digits: int) -> str:
    median = _median(results, key)
    if median is None:
        return "-"
    every = ", ".join(f"{r.summary[key]:.{digits}f}" if r.summary and r.summary.get(key) is not None else "failed"
                      for r in results)
    return f"{median:.{digits}f} ({every})"


def median_groups(results: Sequence[CellResult]) -> dict[tuple[str, float | None, int], list[CellResult]]:
    """Cells of one column, DRAM size and agent count, in run order."""
    groups: dict[tuple[str, float | None, int], list[CellResult]] = {}
    for r in sorted(results, key=lambda r: r.run):
        groups.setdefault((r.config, r.dram_gb, r.agents), []).append(r)
    return groups


def median_summary(results: Sequence[CellResult]) -> list[dict]:
    """Per column, DRAM size and agent count: the medians over runs and the ratios to vllm-fs."""
    groups = median_groups(results)
    out = []
    for (config, dram, agents), cells in groups.items():
        row = {"config": config, "dram_gb": dram, "agents": agents, "runs": len(cells)}
        for key in ("ttft_mean_s", "output_tokens_per_s", "cache_served_share", "cache_served_share_last_third"):
            row[key] = _median(cells, key)
        fs = groups.get(("vllm-fs", dram, agents))
        fs_ttft, fs_toks = (_median(fs, "ttft_mean_s"), _median(fs, "output_tokens_per_s")) if fs else (None, None)
        row["ttft_vs_vllm_fs"] = fs_ttft / row["ttft_mean_s"] if fs_ttft and row["ttft_mean_s"] else None
        row["tok_s_vs_vllm_fs"] = row["output_tokens_per_s"] / fs_toks if fs_toks and row["output_tokens_per_s"] \
            else None
        out.append(row)
    return out


def median_rows(results: Sequence[CellResult]) -> list[list[str]]:
    groups = median_groups(results)
    out = []
    for row in median_summary(results):
        cells = groups[(row["config"], row["dram_gb"], row["agents"])]
        ratio = [f"{row[k]:.2f}x" if row[k] else "-" for k in ("ttft_vs_vllm_fs", "tok_s_vs_vllm_fs")]
        out.append([row["config"], "-" if row["dram_gb"] is None else f"{row['dram_gb']:g}", str(row["agents"]),
                    str(row["runs"]), _runs(cells, "ttft_mean_s", 3), _runs(cells, "output_tokens_per_s", 1),
                    format_share(row["cache_served_share"]), format_share(row["cache_served_share_last_third"]),
                    *ratio])
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


def notes(results: Sequence[CellResult]) -> list[str]:
    """The footnotes under the tables: equal-work warnings, then what the columns mean."""
    return [*equal_work_notes(results), SOURCES_NOTE, LAST_THIRD_NOTE, TIER_NOTE]


def _markdown(columns: Sequence[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(row) + " |" for row in body)]


def repeated(results: Sequence[CellResult]) -> bool:
    return any(r.run > 1 for r in results)


def markdown_table(results: Sequence[CellResult]) -> str:
    lines = [*_markdown(COLUMNS, rows(results)), "", *_markdown(TIER_COLUMNS, tier_rows(results)), ""]
    if repeated(results):
        lines = [*_markdown(MEDIAN_COLUMNS, median_rows(results)), "", f"- {MEDIAN_NOTE}", "", *lines]
    return "\n".join(lines + [f"- {note}" for note in notes(results)]) + "\n"


def rich_median_table(results: Sequence[CellResult], title: str = "medians over interleaved runs") -> Table:
    table = Table(*MEDIAN_COLUMNS, title=title)
    for row in median_rows(results):
        table.add_row(*row)
    return table


def rich_table(results: Sequence[CellResult], title: str = "grid") -> Table:
    table = Table(*COLUMNS, title=title)
    for row in rows(results):
        table.add_row(*row)
    return table


def rich_tier_table(results: Sequence[CellResult], title: str = "tiers below the CPU tier, restarts") -> Table:
    table = Table(*TIER_COLUMNS, title=title)
    for row in tier_rows(results):
        table.add_row(*row)
    return table
