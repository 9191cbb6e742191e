"""The offline runner's cache steps (lifeboatcache_vllm.cache_steps) and the plan of
``bench returning --stack`` (lifeboatcache.bench.returning_stack), without an engine: a real
TieredCache of a DRAM tier over two file tiers stands in for the engine's S3 stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_vllm.cache_steps import run_step

from lifeboatcache.bench.returning_stack import plan_steps, prepare_stack

BLOCK = 4096


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[TieredCache]:
    tiers = [{"name": "dram", "backend": "dram", "capacity_gb": 1e-3, "stage": True},
             {"name": "nvme", "backend": "file", "capacity_gb": 1e-2, "path": str(tmp_path / "nvme"), "stage": True},
             {"name": "remote", "backend": "file", "capacity_gb": 1e-2, "path": str(tmp_path / "remote")}]
    cfg = load_config_dict({"tiers": tiers, "fallback_local": {"enabled": False, "path": str(tmp_path / "fb")}})
    with TieredCache(cfg, background_index=False) as opened:
        yield opened


def store_session(cache: TieredCache, tag: str, n: int) -> list[BlockKey]:
    keys = [BlockKey("steps", bytes([i]) * 32) for i in range(n)]
    hints = [BlockHint(tag=tag, parent=keys[i - 1] if i else None, depth=i) for i in range(n)]
    assert cache.put(keys, [bytes([i]) * BLOCK for i in range(n)], hints=hints) == [True] * n
    return keys


def where(cache: TieredCache, keys: list[BlockKey]) -> dict[str, int]:
    return {t.name: sum(t.presence(k) is True for k in keys) for t in cache.all_tiers}


def test_only_in_leaves_the_session_in_the_named_tier_and_below(cache: TieredCache) -> None:
    keys = store_session(cache, "s", 4)
    assert where(cache, keys) == {"dram": 4, "nvme": 4, "remote": 4}
    out = run_step({"op": "only_in", "tier": "remote"}, cache)
    assert out["blocks"] == 4 and out["held_in_remote"] == 4 and out["discarded_bytes"] >= 8 * BLOCK
    assert where(cache, keys) == {"dram": 0, "nvme": 0, "remote": 4}
    assert all(cache.get(keys, [bytearray(BLOCK) for _ in keys])), "still a hit, from the bottom tier"
    with pytest.raises(ValueError, match="no tier 's3'"):
        run_step({"op": "only_in", "tier": "s3"}, cache)


def test_staging_steps_switch_it_and_hint_the_session(cache: TieredCache) -> None:
    keys = store_session(cache, "agent-1", 4)
    run_step({"op": "only_in", "tier": "remote"}, cache)
    off = run_step({"op": "staging", "enabled": False}, cache)
    assert off["staging"]["enabled"] is False and cache.stager.enabled is False
    assert run_step({"op": "stage", "session": "agent-1", "eta_s": 0}, cache)["known_blocks"] == 0
    assert run_step({"op": "staging_idle"}, cache)["idle"] and where(cache, keys)["dram"] == 0

    assert run_step({"op": "staging", "enabled": True}, cache)["staging"]["enabled"] is True
    assert run_step({"op": "stage", "session": "agent-1", "eta_s": 0}, cache)["known_blocks"] == 4
    done = run_step({"op": "staging_idle"}, cache)
    assert done["idle"] and done["staged_bytes"] >= 4 * BLOCK
    assert where(cache, keys)["dram"] == 4, "staged up from the bottom tier"
    with pytest.raises(ValueError, match="unknown cache step"):
        run_step({"op": "evict"}, cache)


def test_the_stack_gets_the_benchs_s3_and_paths_and_is_checked(tmp_path: Path) -> None:
    s3 = {"url": "s3://b/kv", "endpoint_url": "http://127.0.0.1:1", "access_key_id": "k", "secret_access_key": "s"}
    raw = {"tiers": [{"name": "dram", "backend": "dram", "capacity_gb": 1, "stage": True},
                     {"name": "nvme", "backend": "file", "path": "nvme", "capacity_gb": 1, "stage": True},
                     {"name": "s3", "backend": "s3", "url": "s3://placeholder/kv", "capacity_gb": 10}]}
    config, file_tier, s3_tier = prepare_stack(raw, tmp_path, s3)
    assert (file_tier, s3_tier) == ("nvme", "s3")
    assert config["tiers"][1]["path"] == str(tmp_path / "tiers" / "nvme")
    assert config["tiers"][2]["url"] == "s3://b/kv" and config["dashboard"] == {"enabled": False}
    with pytest.raises(ValueError, match="one tier with backend"):
        prepare_stack({"tiers": raw["tiers"][:2]}, tmp_path, s3)
    with pytest.raises(ValueError, match="backend = \"file\" above"):
        prepare_stack({"tiers": [raw["tiers"][0], raw["tiers"][2]]}, tmp_path, s3)


def test_each_return_is_timed_after_a_reset_with_the_session_where_it_should_be() -> None:
    steps, timed = plan_steps([[5] * 10, [6] * 10], "nvme", "s3", think_s=4.0)
    assert {m: len(v) for m, v in timed.items()} == {"cold": 2, "file": 2, "s3_off": 2, "s3_on": 2}
    for measure in ("file", "s3_off", "s3_on"):
        for i in timed[measure]:
            assert steps[i]["reset"] and steps[i]["session"].startswith("returning-")
    assert [op["op"] for op in steps[timed["file"][0]]["cache"]] == ["staging", "only_in"]
    for measure, enabled in (("s3_off", False), ("s3_on", True)):
        for i in timed[measure]:
            ops = steps[i]["cache"]
            assert ops[0] == {"op": "staging", "enabled": enabled} and ops[1] == {"op": "only_in", "tier": "s3"}
            assert ops[2]["eta_s"] == steps[i]["settle_s"] == 4.0, "the hint names the think time it waits"
    assert timed["s3_off"][0] < timed["s3_on"][0] and timed["s3_on"][1] < timed["s3_off"][1], "order alternates"
