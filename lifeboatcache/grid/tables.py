"""The grid as Markdown tables (for READMEs and issues) and rich tables (for the console).

The main table compares the columns on equal work; the second says what each tier below the
CPU tier did (with ``--disk-gb``: on a disk that fills up) and, with ``--restart-after-round``,
how the first round on the fresh server went. Footnotes say what each number means.
"""

from __future__ import annotations

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
    return [r.config, "-" if r.dram_gb is None else f"{r.dram_gb:g}", str(r.agents)]


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


def markdown_table(results: Sequence[CellResult]) -> str:
    lines = [*_markdown(COLUMNS, rows(results)), "", *_markdown(TIER_COLUMNS, tier_rows(results)), ""]
    return "\n".join(lines + [f"- {note}" for note in notes(results)]) + "\n"


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
