"""``LIFEBOAT_CACHE=1 vllm serve``: the OpenAI server on loopback, configured by our plugin alone."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
from lifeboatcache_vllm.autoenable import SPEC_MODULE, SPEC_NAME
from lifeboatcache_vllm.launch import GIB, free_port
from prometheus_client.parser import text_string_to_metric_families

from lifeboatcache.grid.server import VllmServer
from tests.adapters.vllm.engine import (
    ANSWER_TOKENS,
    ENGINE,
    PROMPT_TOKENS,
    first_turns,
    full_chunk_tokens,
    serve_options,
    write_serve_config,
)

pytestmark = pytest.mark.slow


#: vLLM's CPU tier: 0.05 GiB holds 4 of SmolLM2's 11.8 MB float32 chunks; the four sessions need 8
CPU_GB = 0.05
SESSIONS = 4


def our_counters(port: int, timeout: float = 60.0) -> dict[str, float]:
    """Our tier's counters from the ``/metrics`` the engine's dashboard serves (``lifeboatcache_*``).

    ``hits``: chunks our file tier served; ``lookup_hit_tokens``: tokens vLLM got from our tier
    when its own CPU tier missed (the adapter counts them as it answers vLLM's lookups). The
    dashboard thread may still be binding its port right after ``/health``: retried until it answers.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                text = resp.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "lifeboatcache_hits_total" and sample.labels.get("tier") == "nvme":
                out["hits"] = sample.value
            elif sample.name in ("lifeboatcache_lookup_hit_tokens_total", "lifeboatcache_lookup_tokens_total"):
                out[sample.name.removeprefix("lifeboatcache_").removesuffix("_total")] = sample.value
    assert set(out) == {"hits", "lookup_hit_tokens", "lookup_tokens"}, text[-3000:]
    return out


def test_lifeboat_cache_env_enables_tier_in_vllm_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt pushed out of device KV and vLLM's CPU tier comes back from *our* tier, same answer.

    Cached tokens alone cannot tell which tier served them; our own metrics can: the returning
    request's prefix must be hits of our file tier (``lifeboatcache_hits_total{tier="nvme"}``)
    and looked-up hit tokens, and its greedy answer the one computed from scratch.
    """
    tier = tmp_path / "tier"
    port = free_port()
    config = write_serve_config(tmp_path / "lifeboat.toml", tier, cpu_gb=CPU_GB, dashboard_port=port)
    # only this server's samples: another engine on the box spools to the default node directory
    monkeypatch.setenv("LIFEBOAT_METRICS_DIR", str(tmp_path / "metrics"))
    prompt, *others = first_turns(SESSIONS, seed=7)
    with VllmServer.for_options(serve_options(config), tmp_path / "serve.log") as server:
        computed = server.complete(prompt, ANSWER_TOKENS)
        before = our_counters(port)
        # the three later sessions push the first out of the engine's KV (1,536 tokens) and out
        # of vLLM's CPU tier (4 chunks), not out of ours (1 GB)
        for other in others:
            assert server.complete(other, ANSWER_TOKENS)["choices"][0]["text"]
        returned = server.complete(prompt, ANSWER_TOKENS)
        after = our_counters(port)
        log = server.log_text()
    assert "lifeboatcache: enabled below vLLM's CPU tier" in log
    chunk_bytes = int(re.search(r"lifeboatcache tier ready: .* (\d+)-byte chunks", log)[1])  # type: ignore[index]
    # "auto" moves one engine block per chunk: the CPU tier must hold less than the other sessions store
    chunks_per_session = PROMPT_TOKENS // int(ENGINE["block_size"])
    assert int(CPU_GB * GIB) // chunk_bytes < (SESSIONS - 1) * chunks_per_session, "vLLM's CPU tier holds every session"
    assert computed["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, computed["usage"]
    cached = returned["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= full_chunk_tokens(prompt), returned["usage"]
    # the prefix came from our tier: both full chunks read from the file tier, their tokens counted
    assert after["hits"] - before["hits"] >= 2, (before, after)
    assert after["lookup_hit_tokens"] - before["lookup_hit_tokens"] >= full_chunk_tokens(prompt), (before, after)
    assert returned["choices"][0]["text"] == computed["choices"][0]["text"], (computed, returned)
    assert len(list(tier.rglob("*.lbk"))) >= SESSIONS * 2


def test_explicit_kv_transfer_config_wins(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    config = write_serve_config(tmp_path / "lifeboat.toml", tier)
    explicit = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": SPEC_NAME, "spec_module_path": SPEC_MODULE, "cpu_bytes_to_use": 64 * 1024**2,
        "secondary_tiers": [{"type": "fs", "root_dir": str(tmp_path / "vllm-fs")}]}}
    with VllmServer.for_options(serve_options(config, kv_transfer_config=explicit), tmp_path / "serve.log") as server:
        for prompt in first_turns(2, seed=9):
            assert server.complete(prompt, ANSWER_TOKENS)["choices"][0]["text"]
        log = server.log_text()
    assert "explicit --kv-transfer-config is set" in log
    assert "lifeboatcache: enabled" not in log
    assert not list(tier.rglob("*.lbk"))
