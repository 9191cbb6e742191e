"""Turn a replay's records into the numbers users compare, as a dict, a table or JSON."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from rich.table import Table

from lifeboatcache.replay import stats
from lifeboatcache.replay.runner import ReplayResult


def summarize(result: ReplayResult) -> dict:
    """Summary of one run. TTFT and inter-token figures count successful requests only."""
    ok = [r for r in result.records if r.ok]
    failed = [r for r in result.records if not r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [gap for r in ok for gap in r.chunk_gaps_s]
    itls = [itl for r in ok if (itl := stats.inter_token_latency(sum(r.chunk_gaps_s), r.output_tokens)) is not None]
    output_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    reported = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    cached_source = "usage" if reported else "none"
    cached_tokens: float | None = float(sum(reported)) if reported else None
    local_hits = result.counter_delta("vllm:prefix_cache_hits")
    tier_hits = result.counter_delta("vllm:external_prefix_cache_hits")
    if cached_tokens is None and local_hits is not None:
        cached_tokens, cached_source = local_hits + (tier_hits or 0.0), "server_metrics"
    per_round: dict[int, list[float]] = defaultdict(list)
    for r in ok:
        if r.ttft_s is not None:
            per_round[r.turn].append(r.ttft_s)
    examples: dict[str, str] = {}
    for r in failed:
        examples.setdefault(r.error or "", f"{r.session_id} turn {r.turn}: {r.error_detail}")
    return {
        "requests": len(result.records),
        "succeeded": len(ok),
        "failed": len(failed),
        "failures": dict(Counter(r.error for r in failed)),
        "failure_examples": examples,
        "ttft_mean_s": stats.mean(ttfts),
        "ttft_p50_s": stats.percentile(ttfts, 50),
        "ttft_p99_s": stats.percentile(ttfts, 99),
        "itl_mean_s": stats.mean(itls),  # per request: decode time / (output tokens - 1)
        "chunk_gap_p99_s": stats.percentile(gaps, 99),
        "output_tokens": output_tokens,
        "output_tokens_per_s": stats.throughput(output_tokens, result.wall_s),
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": cached_tokens,
        "cached_prompt_tokens_source": cached_source,
        "cache_served_share": (cached_tokens / prompt_tokens) if cached_tokens is not None and prompt_tokens else None,
        "engine_prefix_cache_hit_tokens": local_hits,
        "external_tier_hit_tokens": tier_hits,
        "wall_s": result.wall_s,
        "ttft_mean_s_per_round": {turn: stats.mean(v) for turn, v in sorted(per_round.items())},
    }


def json_safe(value: object) -> object:
    """NaN (no successful request) becomes null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def _seconds(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


SUMMARY_COLUMNS = ("requests", "failed", "TTFT mean s", "P50 s", "P99 s", "out tok/s",
                   "output tokens", "prompt tokens", "from cache", "wall s")


def summary_row(summary: dict) -> list[str]:
    return [
        str(summary["requests"]), str(summary["failed"]), _seconds(summary["ttft_mean_s"]),
        _seconds(summary["ttft_p50_s"]), _seconds(summary["ttft_p99_s"]),
        f"{summary['output_tokens_per_s']:.1f}", _tokens(summary["output_tokens"]),
        _tokens(summary["prompt_tokens"]),
        f"{_tokens(summary['cached_prompt_tokens'])} ({_share(summary['cache_served_share'])})",
        f"{summary['wall_s']:.1f}",
    ]


def summary_table(rows: dict[str, dict], title: str = "replay") -> Table:
    """One row per labelled summary (e.g. per server configuration)."""
    table = Table("run", *SUMMARY_COLUMNS, title=title)
    for label, summary in rows.items():
        table.add_row(label, *summary_row(summary))
    return table


def failure_lines(summary: dict) -> list[str]:
    """One line per failure reason: count and the first example, for the console."""
    return [f"{reason}: {count} request(s), e.g. {summary['failure_examples'].get(reason, '')}"
            for reason, count in summary["failures"].items()]
