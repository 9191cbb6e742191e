"""Helpers for the vLLM engine tests: run a plan in a fresh engine process, make sessions."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from lifeboatcache_vllm.launch import ServeOptions
from lifeboatcache_vllm.offline import engine_env

from lifeboatcache.models import smollm2_hf_dir

REPO = Path(__file__).resolve().parents[3]
RESULT_PREFIX = "LIFEBOAT-RESULT "

# A device-KV budget of 48 blocks x 32 tokens (1,536 tokens) for four 600-token sessions:
# the sessions evict each other from the engine's own prefix cache.
ENGINE = {"dtype": "float32", "max_model_len": 1024, "block_size": 32, "num_gpu_blocks": 48,
          "kv_cache_bytes": 256 * 1024**2}
PROMPT_TOKENS = 600
FOLLOW_UP_TOKENS = 64
ANSWER_TOKENS = 8
CHUNK_TOKENS = 256  # the offline runner's chunk (its plan's "chunk_tokens" default), not "auto"


def run_engine(plan: dict[str, Any], log: Path, timeout: float = 900.0,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``plan`` with ``python -m lifeboatcache_vllm.offline`` in a new process; its result."""
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "lifeboatcache_vllm.offline"], input=json.dumps(plan),
                              text=True, stdout=subprocess.PIPE, stderr=out, cwd=REPO,
                              env={**engine_env(), **(env or {})}, timeout=timeout, check=False)
    with open(log, "a") as out:  # vLLM logs to stdout
        out.write(proc.stdout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, (
        f"engine run failed (exit {proc.returncode}); last log lines:\n" + log.read_text()[-5000:]
    )
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def first_turns(n: int = 4, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(1000, 40000) for _ in range(PROMPT_TOKENS)] for _ in range(n)]


def returning_turns(first: list[list[int]], answers: list[list[int]], seed: int = 1) -> list[list[int]]:
    """Each session comes back with its first prompt, the answer and a new user message."""
    rng = random.Random(seed)
    return [p + a + [rng.randrange(1000, 40000) for _ in range(FOLLOW_UP_TOKENS)]
            for p, a in zip(first, answers, strict=True)]


def tier_config(path: Path, cpu_gb: float = 0.05) -> dict[str, Any]:
    return {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 2, "path": str(path)}],
            "engine": {"vllm": {"native_cpu_gb": cpu_gb}}}


def write_serve_config(path: Path, tier: Path, cpu_gb: float = 0.05, dashboard_port: int | None = None) -> Path:
    """A lifeboatcache TOML config for ``LIFEBOAT_CACHE_CONFIG``: one file tier, a small CPU tier.

    ``dashboard_port``: where the engine's dashboard serves our ``/metrics`` (default: the
    config's 9400, which another engine on this box may hold).
    """
    dashboard = "" if dashboard_port is None else f"[dashboard]\nport = {dashboard_port}\n"
    path.write_text(f'[[tiers]]\nname = "nvme"\nbackend = "file"\ncapacity_gb = 1\npath = "{tier}"\n'
                    f"[engine.vllm]\nnative_cpu_gb = {cpu_gb}\n{dashboard}")
    return path


def serve_options(config: Path, **extra: object) -> ServeOptions:
    """``vllm serve`` of SmolLM2 with the test engine settings and ``LIFEBOAT_CACHE=1``."""
    return ServeOptions(model=str(smollm2_hf_dir()), dtype=str(ENGINE["dtype"]),
                        max_model_len=int(ENGINE["max_model_len"]), block_size=int(ENGINE["block_size"]),
                        num_gpu_blocks=int(ENGINE["num_gpu_blocks"]), kv_cache_bytes=int(ENGINE["kv_cache_bytes"]),
                        lifeboat=True, lifeboat_config=str(config), **extra)  # type: ignore[arg-type]


def full_chunk_tokens(prompt: list[int]) -> int:
    """Tokens of ``prompt`` in full offloaded chunks (the last token is always computed)."""
    return (len(prompt) - 1) // CHUNK_TOKENS * CHUNK_TOKENS
