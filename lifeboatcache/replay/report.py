"""Turn a replay's records into the numbers users compare, as a dict, a table or JSON."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from rich.table import Table

from lifeboatcache.replay import stats
from lifeboatcache.replay.client import counter_key
from lifeboatcache.replay.records import RequestRecord
from lifeboatcache.replay.runner import ReplayResult

#: vLLM's ``source`` label values of ``vllm:prompt_tokens_cached_by_source``, grouped as we report them
CACHE_SOURCES = {"device": ("device",), "cpu": ("host",), "below": ("disk", "p2p"),
                 "unattributed": ("external_unspecified",)}

SOURCES_NOTE = (
    "from cache by source (vLLM's Prometheus /metrics, read before and after each server's replay): "
    "device = vllm:prompt_tokens_cached_by_source{source=device} (the engine's own prefix cache), "
    "CPU = source=host (vLLM's CPU offload tier), below = source=disk/p2p (the tier below the CPU tier: "
    "vLLM's fs tier or lifeboatcache), ? = source=external_unspecified (a connector hit vLLM could not "
    "attribute). Counted by the scheduler when a request is admitted, so a request that is preempted and "
    "re-admitted counts once, and they need not add up to the usage-reported 'from cache'; a server "
    "without the by-source counter falls back to vllm:prefix_cache_hits (device) and "
    "vllm:external_prefix_cache_hits (all external, shown as below). Shares are of the prompt tokens sent.")


def cache_sources(result: ReplayResult) -> dict[str, float] | None:
    """Prompt tokens served per cache source over the replay (see :data:`SOURCES_NOTE`); None without metrics."""
    by_source = {group: sum(result.counter_delta(counter_key("vllm:prompt_tokens_cached_by_source", "source", v))
                            or 0.0 for v in values) for group, values in CACHE_SOURCES.items()}
    if result.counter_delta("vllm:prompt_tokens_cached_by_source") is not None:
        return by_source
    local = result.counter_delta("vllm:prefix_cache_hits")
    if local is None:
        return None
    return {"device": local, "cpu": 0.0, "below": result.counter_delta("vllm:external_prefix_cache_hits") or 0.0,
            "unattributed": 0.0, "fallback": 1.0}


def cached_share(records: list[RequestRecord]) -> float | None:
    """Usage-reported cached prompt tokens / prompt tokens of successful ``records``; None if unreported."""
    ok = [r for r in records if r.ok]
    reported = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens for r in ok)
    return sum(reported) / prompt if reported and prompt else None


def last_rounds(records: list[RequestRecord], fraction: float = 1 / 3) -> list[int]:
    """The last ``fraction`` of the rounds seen (at least one), e.g. rounds 4 and 5 of six."""
    rounds = 1 + max((r.turn for r in records), default=-1)
    count = max(1, round(rounds * fraction)) if rounds else 0
    return list(range(rounds - count, rounds))


def round_summary(records: list[RequestRecord]) -> dict:
    """TTFT and cache share of a group of requests (one round, e.g. the first after a restart)."""
    ok = [r for r in records if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    return {"requests": len(records), "failed": len(records) - len(ok), "ttft_mean_s": stats.mean(ttfts),
            "prompt_tokens": sum(r.prompt_tokens for r in ok), "cache_served_share": cached_share(records)}


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
    by_round: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in result.records:
        by_round[r.turn].append(r)
    tail_rounds = last_rounds(result.records)
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
        "cached_tokens_by_source": cache_sources(result),
        "server_counters": {name: result.counter_delta(name) for name in sorted(result.counters_after)},
        "last_third_rounds": tail_rounds,
        "cache_served_share_last_third": cached_share([r for r in result.records if r.turn in tail_rounds]),
        "cache_served_share_per_round": {turn: cached_share(rs) for turn, rs in sorted(by_round.items())},
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


def format_seconds(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def format_share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def format_tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


SUMMARY_COLUMNS = ("requests", "failed", "TTFT mean s", "P50 s", "P99 s", "out tok/s",
                   "output tokens", "prompt tokens", "from cache", "wall s")


def summary_row(summary: dict) -> list[str]:
    return [
        str(summary["requests"]), str(summary["failed"]), format_seconds(summary["ttft_mean_s"]),
        format_seconds(summary["ttft_p50_s"]), format_seconds(summary["ttft_p99_s"]),
        f"{summary['output_tokens_per_s']:.1f}", format_tokens(summary["output_tokens"]),
        format_tokens(summary["prompt_tokens"]),
        f"{format_tokens(summary['cached_prompt_tokens'])} ({format_share(summary['cache_served_share'])})",
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
