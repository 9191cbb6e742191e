"""`bench returning` compares tiers, so both engine runs must offload the same chunk.

Without an engine: the chunk each run offloads is read from the kv-transfer configs the bench's
plans produce, as vLLM's spec would read them (``chunk_blocks`` for ours, ``block_size`` for
vLLM's fs tier).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from lifeboatcache_vllm.offline import kv_transfer_config
from lifeboatcache_vllm.settings import EXTRA_KEY, resolve_config, vllm_settings
from lifeboatcache_vllm.spec import chunk_blocks

from lifeboatcache.bench.returning import CHUNK_TOKENS, engine_settings


def test_both_tiers_offload_the_same_chunk(tmp_path: Path) -> None:
    base, lifeboat = engine_settings("model", 7430, tmp_path, io_threads=8, codec="none")
    ours_extra = kv_transfer_config({**base, "connector": "lifeboat",
                                     "lifeboat_config": lifeboat})["kv_connector_extra_config"]
    fs_extra = kv_transfer_config({**base, "connector": "vllm_fs",
                                   "fs_dir": str(tmp_path / "fs")})["kv_connector_extra_config"]

    block = base["block_size"]
    engine_groups = SimpleNamespace(groups=(SimpleNamespace(tokens_per_block=block),))
    ours = chunk_blocks(engine_groups, vllm_settings(resolve_config(ours_extra[EXTRA_KEY])).native_block_tokens) * block
    assert ours == fs_extra["block_size"] == CHUNK_TOKENS


def test_o_direct_reaches_our_tier_only_when_asked(tmp_path: Path) -> None:
    """``bench returning --o-direct`` measures our tier with O_DIRECT block I/O: the flag must reach
    the file tier's options through the engine's kv-transfer config, and stay off without it."""

    def tier_options(o_direct: bool) -> dict[str, object]:
        base, lifeboat = engine_settings("model", 7430, tmp_path, io_threads=8, codec="none", o_direct=o_direct)
        extra = kv_transfer_config({**base, "connector": "lifeboat",
                                    "lifeboat_config": lifeboat})["kv_connector_extra_config"]
        (tier,) = resolve_config(extra[EXTRA_KEY]).tiers
        return tier.model_extra or {}

    assert tier_options(True)["o_direct"] is True
    assert tier_options(False).get("o_direct", False) is False
