"""What the tier below vLLM's CPU tier did in a cell: stores refused or failed, evictions, disk.

The two tiers report in different places, so each is read where it reports:

- vLLM's ``fs`` tier has no counters of its own: each block write or read that raises is one
  ``Job N block I/O failed: ...`` error line in the server log (``DualQueueThreadPool``), and
  it never evicts (it has no capacity). We count those lines in every server log of the cell.
- lifeboatcache counts per tier (``lifeboatcache_*`` on its dashboard's ``/metrics``, scraped
  just before each server of the cell stops): blocks stored, evictions, I/O errors, and the
  blocks the engine offered (``put_blocks``). A tier that is down or full skips a store
  without an error, so "refused" is offered minus stored in the bottom tier.
- vLLM's tiering manager counts failed jobs into (``cascade``) and out of (``promotion``) any
  tier below the CPU tier, for both: ``vllm:kv_offload_tiering_*_job_failures``.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Sequence

from lifeboatcache.replay.client import parse_prometheus_samples

#: the fs tier's per-block failure line (vllm/v1/kv_offload/tiering/fs/thread_pool.py)
FS_FAILURE = re.compile(r"Job \S+ block I/O failed")
#: per-tier counters of lifeboatcache we keep (``lifeboatcache_<name>_total{tier=...}``)
TIER_COUNTERS = ("puts", "evictions", "errors", "hits", "bytes_written")
#: per-tier gauges (the last server's values)
TIER_GAUGES = ("blocks", "bytes_used")


def count_fs_failures(log_texts: Sequence[str]) -> int:
    """Failed block I/O jobs of vLLM's fs tier, from its servers' logs."""
    return sum(len(FS_FAILURE.findall(text)) for text in log_texts)


def parse_lifeboat_metrics(text: str) -> dict:
    """``{"put_blocks": n, "tiers": {tier: {counter or gauge: value}}}`` from lifeboatcache's /metrics."""
    out: dict = {"put_blocks": 0.0, "tiers": {}}
    for name, labels, value in parse_prometheus_samples(text):
        base = name.removeprefix("lifeboatcache_").removesuffix("_total")
        if name == "lifeboatcache_put_blocks_total":
            out["put_blocks"] += value
        elif "tier" in labels and (base in TIER_GAUGES or (base in TIER_COUNTERS and name.endswith("_total"))):
            tier = out["tiers"].setdefault(labels["tier"], {})
            tier[base] = tier.get(base, 0.0) + value
    return out


def metrics_text(base_url: str, timeout_s: float = 10.0) -> str | None:
    """The Prometheus text a server serves at ``/metrics``; None when it does not answer."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
            return response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None


def scrape_lifeboat(port: int, timeout_s: float = 10.0) -> dict | None:
    """Our tier's counters from the dashboard on ``port``; None when it does not answer."""
    text = metrics_text(f"http://127.0.0.1:{port}", timeout_s)
    return None if text is None else parse_lifeboat_metrics(text)


def merge_lifeboat(parts: Sequence[dict | None]) -> dict | None:
    """Counters summed over the cell's servers (each starts at zero); gauges from the last one."""
    seen = [p for p in parts if p is not None]
    if not seen:
        return None
    merged: dict = {"put_blocks": sum(p["put_blocks"] for p in seen), "tiers": {}}
    for part in seen:
        for tier, values in part["tiers"].items():
            into = merged["tiers"].setdefault(tier, {})
            for name, value in values.items():
                into[name] = value if name in TIER_GAUGES else into.get(name, 0.0) + value
    return merged


def tier_outcome(kind: str, summary: dict, log_texts: Sequence[str], lifeboat: dict | None) -> dict:
    """One cell's tier figures; None where a figure does not exist for that configuration."""
    counters = summary.get("server_counters") or {}
    outcome: dict = {"stores_refused": None, "store_errors": None, "evictions": None,
                     "cascade_job_failures": counters.get("vllm:kv_offload_tiering_cascade_job_failures"),
                     "promotion_job_failures": counters.get("vllm:kv_offload_tiering_promotion_job_failures"),
                     "kept_serving": summary.get("failed", 0) == 0}
    if kind == "vllm-fs":
        outcome.update(store_errors=count_fs_failures(log_texts), evictions=0)
    elif kind == "lifeboatcache" and lifeboat is not None:
        tiers = list(lifeboat["tiers"].values())
        bottom = tiers[-1] if tiers else {}
        outcome.update(store_errors=sum(t.get("errors", 0.0) for t in tiers),
                       evictions=sum(t.get("evictions", 0.0) for t in tiers),
                       stores_refused=max(0.0, lifeboat["put_blocks"] - bottom.get("puts", 0.0)),
                       lifeboat=lifeboat)
    return outcome
