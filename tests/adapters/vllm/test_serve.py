"""``LIFEBOAT_CACHE=1 vllm serve``: the OpenAI server on loopback, configured by our plugin alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from lifeboatcache_vllm.autoenable import SPEC_MODULE, SPEC_NAME
from lifeboatcache_vllm.launch import VllmServer

from tests.adapters.vllm.engine import ANSWER_TOKENS, first_turns, returning_turns, serve_options, write_serve_config

pytestmark = pytest.mark.slow


def test_lifeboat_cache_env_enables_tier_in_vllm_serve(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    config = write_serve_config(tmp_path / "lifeboat.toml", tier)
    first = first_turns(4, seed=7)
    with VllmServer(serve_options(config), tmp_path / "serve.log") as server:
        answers = [server.complete(p, ANSWER_TOKENS)["choices"][0]["text"] for p in first]
        assert all(answers)
        # the three later sessions pushed the first out of the engine's KV (1,536 tokens)
        answer_ids = first_turns(4, seed=8)  # token ids stand in for the text answers
        returning = returning_turns(first[:1], [answer_ids[0][:ANSWER_TOKENS]])[0]
        response = server.complete(returning, ANSWER_TOKENS)
        log = server.log()
    assert "lifeboatcache: enabled below vLLM's CPU tier" in log
    assert response["usage"]["prompt_tokens_details"]["cached_tokens"] >= 512, response["usage"]
    assert len(list(tier.rglob("*.lbk"))) >= 8


def test_explicit_kv_transfer_config_wins(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    config = write_serve_config(tmp_path / "lifeboat.toml", tier)
    explicit = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": SPEC_NAME, "spec_module_path": SPEC_MODULE, "cpu_bytes_to_use": 64 * 1024**2,
        "secondary_tiers": [{"type": "fs", "root_dir": str(tmp_path / "vllm-fs")}]}}
    with VllmServer(serve_options(config, kv_transfer_config=explicit), tmp_path / "serve.log") as server:
        for prompt in first_turns(2, seed=9):
            assert server.complete(prompt, ANSWER_TOKENS)["choices"][0]["text"]
        log = server.log()
    assert "explicit --kv-transfer-config is set" in log
    assert "lifeboatcache: enabled" not in log
    assert not list(tier.rglob("*.lbk"))
