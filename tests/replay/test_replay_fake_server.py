"""The replay client against a real HTTP server on loopback (a fake OpenAI server process)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from lifeboatcache.cli import app
from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.report import summarize
from lifeboatcache.replay.runner import ReplayOptions, replay
from lifeboatcache.replay.sessions import Session, Spawn, TokenMap, Turn
from lifeboatcache.replay.synthetic import SyntheticSpec, generate_sessions

from .conftest import free_port


def _run(sessions: list[Session], url: str, agents: int = 2, max_tokens: int = 4, **kw: object):
    options = ReplayOptions(agents=agents, max_tokens=max_tokens, token_map=TokenMap(tokens_per_block=4), **kw)
    return asyncio.run(replay(sessions, Endpoint(url, "fake-model", timeout_s=20), options))


def _small_sessions(count: int = 3, turns: int = 3) -> list[Session]:
    return generate_sessions(SyntheticSpec(sessions=count, turns=turns, shared_prefix_tokens=128,
                                           first_user_tokens=64, growth_tokens=64, think_time_s=0.01))


def test_turns_extend_prompts_with_equal_work_and_cache_hits(fake_server) -> None:
    server = fake_server()
    result = _run(_small_sessions(), server.url, agents=2, max_tokens=5)
    summary = summarize(result)
    assert summary["requests"] == 9 and summary["failed"] == 0
    assert summary["output_tokens"] == 45
    sent = server.requests()
    assert len(sent) == 9
    for request in sent:
        body = request["body"]
        assert body["ignore_eos"] is True and body["max_tokens"] == 5 and body["stream"] is True
    by_first_user_block = {}
    for request in sent:
        prompt = request["body"]["prompt"]
        by_first_user_block.setdefault(tuple(prompt[8:12]), []).append(prompt)
    assert len(by_first_user_block) == 3  # three sessions, same 2-block (8-token) system prefix
    for prompts in by_first_user_block.values():
        prompts.sort(key=len)
        assert [len(p) for p in prompts] == [12, 16, 20]
        for prev, cur in itertools.pairwise(prompts):
            assert cur[: len(prev)] == prev
    # The toy server's prefix cache: every turn after a session's first reuses the previous prompt.
    assert summary["cached_prompt_tokens_source"] == "usage"
    assert summary["cached_prompt_tokens"] >= 2 * (12 + 16) * 3 / 2
    assert summary["engine_prefix_cache_hit_tokens"] == summary["cached_prompt_tokens"]
    assert summary["ttft_p50_s"] <= summary["ttft_p99_s"]
    assert summary["output_tokens_per_s"] > 0
    assert set(summary["ttft_mean_s_per_round"]) == {0, 1, 2}


def test_subagents_run_concurrently_and_parent_waits(fake_server) -> None:
    server = fake_server("--token-delay", "0.05")
    child = lambda name, start: Session(name, (Turn(block_ids=np.array([start], np.uint64)),))  # noqa: E731
    parent = Session("p", (Turn(block_ids=np.array([1], np.uint64)),
                           Spawn((child("p/a", 10), child("p/b", 20))),
                           Turn(block_ids=np.array([1, 2], np.uint64))))
    result = _run([parent], server.url, agents=1, max_tokens=4)
    assert [r.error for r in result.records] == [None] * 4
    sent = {tuple(r["body"]["prompt"]): r for r in server.requests()}
    tm = TokenMap(tokens_per_block=4)
    a, b = (sent[tuple(tm.tokens(np.array([i], np.uint64)).tolist())] for i in (10, 20))
    last = sent[tuple(tm.tokens(np.array([1, 2], np.uint64)).tolist())]
    assert a["arrived"] < b["finished"] and b["arrived"] < a["finished"]  # overlapped
    assert last["arrived"] >= max(a["finished"], b["finished"]) - 0.01  # the parent waited


def test_dead_endpoint_gives_per_request_errors_and_completes() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _run(_small_sessions(2, 2), url)
    summary = summarize(result)
    assert summary["requests"] == 4 and summary["failed"] == 4
    assert summary["failures"] == {"unreachable": 4}
    assert url in summary["failure_examples"]["unreachable"]
    assert summary["output_tokens"] == 0 and summary["cached_prompt_tokens"] is None


def test_5xx_and_4xx_are_reported_with_the_server_message(fake_server) -> None:
    for status in (500, 429):
        server = fake_server("--fail-status", str(status))
        summary = summarize(_run(_small_sessions(2, 2), server.url))
        assert summary["failures"] == {f"http_{status}": 4}
        assert f"injected failure {status}" in summary["failure_examples"][f"http_{status}"]


def test_session_longer_than_the_context_fails_only_its_long_turns(fake_server) -> None:
    server = fake_server("--max-context", "20")  # prompts 12, 16, 20 tokens + 4 output
    result = _run(_small_sessions(2, 3), server.url, max_tokens=4)
    summary = summarize(result)
    assert summary["requests"] == 6
    assert summary["failures"] == {"context_too_long": 2}
    assert "maximum context length is 20" in summary["failure_examples"]["context_too_long"]
    assert sorted(r.turn for r in result.records if not r.ok) == [2, 2]
    assert summary["succeeded"] == 4 and summary["output_tokens"] == 16


def test_cli_replays_real_traces_and_writes_records(fake_server, traces_dir: Path, tmp_path: Path) -> None:
    server = fake_server("--max-context", "3000")
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, [
        "replay", "--url", server.url, "--traces", str(traces_dir / "trace_0282.json.gz"), "--agents", "1",
        "--rounds", "3", "--scale", "0.03125", "--max-tokens", "3", "--json-out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    # 3 parent turns + 3 sub-agents x 3 turns; the model name came from /v1/models.
    assert saved["summary"]["requests"] == 12
    assert len(saved["records"]) == 12
    assert {r["body"]["model"] for r in server.requests()} == {"fake-model"}
    summary = json.loads(result.stdout[result.stdout.index("{"):])
    assert summary["requests"] == 12 and summary["output_tokens"] == 3 * summary["succeeded"]


def test_chat_sessions_use_the_chat_endpoint(fake_server) -> None:
    server = fake_server()
    session = Session("c", (Turn(messages=({"role": "user", "content": "hi"},)),
                            Turn(messages=({"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
                                           {"role": "user", "content": "more"}))))
    summary = summarize(_run([session], server.url, agents=1, max_tokens=3))
    assert summary["failed"] == 0 and summary["output_tokens"] == 6
    assert [r["path"] for r in server.requests()] == ["/v1/chat/completions"] * 2
