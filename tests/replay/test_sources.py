"""Session sources: real kv-cache-tester traces (with sub-agents), LMCache JSONL, synthetic."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from lifeboatcache.replay.kvtrace import iter_kvtrace_sessions
from lifeboatcache.replay.lmcache_jsonl import load_lmcache_sessions
from lifeboatcache.replay.sessions import Spawn, TokenMap, Turn
from lifeboatcache.replay.sources import SourceChoice, fits_context, load_sessions, token_map_for_scale
from lifeboatcache.replay.synthetic import SyntheticSpec, generate_sessions
from lifeboatcache.traces import load_conversation


def test_subagents_launched_together_form_one_spawn_after_the_right_turn(traces_dir: Path) -> None:
    path = traces_dir / "trace_0282.json.gz"
    (session,) = iter_kvtrace_sessions(path)
    kinds = [type(step).__name__ for step in session.steps]
    # trace_0282: two parent requests, then three sub-agents launched within 2 s of each other.
    assert kinds[:3] == ["Turn", "Turn", "Spawn"]
    spawn = session.steps[2]
    assert isinstance(spawn, Spawn)
    assert [child.session_id for child in spawn.sessions] == [
        "trace_0282/agent_001", "trace_0282/agent_002", "trace_0282/agent_003"]
    raw = json.loads(__import__("gzip").open(path).read())
    raw_children = [r for r in raw["requests"] if r.get("type") == "subagent"]
    assert [child.count_turns() for child in spawn.sessions] == [len(r["requests"]) for r in raw_children[:3]]
    parent_raw = [r for r in raw["requests"] if r.get("type") != "subagent"]
    assert sum(isinstance(s, Turn) for s in session.steps) == len(parent_raw)
    # The sub-agent's first prompt is its own first request, ids scoped by the conversation.
    first_child_turn = next(spawn.sessions[0].turns())
    expected = np.asarray(raw_children[0]["requests"][0]["hash_ids"], np.uint64)
    assert np.array_equal(first_child_turn.block_ids & np.uint64(0xFFFFFFFF), expected)


def test_max_turns_caps_parent_and_children(traces_dir: Path) -> None:
    (session,) = iter_kvtrace_sessions(traces_dir / "trace_0282.json.gz", max_turns=2)
    # A spawn is kept only when fewer than max_turns parent turns were sent before it.
    assert [type(s).__name__ for s in session.steps] == ["Turn", "Turn"]
    (session,) = iter_kvtrace_sessions(traces_dir / "trace_0282.json.gz", max_turns=3)
    assert [type(s).__name__ for s in session.steps] == ["Turn", "Turn", "Spawn", "Turn"]
    assert all(child.count_turns() == 3 for child in session.steps[2].sessions)


def test_turns_follow_the_trace_and_think_time(traces_dir: Path) -> None:
    path = traces_dir / "trace_0001.json.gz"
    (session,) = iter_kvtrace_sessions(path, max_turns=5)
    conversation = load_conversation(path)
    turns = list(session.turns())
    assert len(turns) == 5
    for turn, request in zip(turns, conversation.streams[0].requests[:5], strict=True):
        assert len(turn.block_ids) == len(request.hash_ids)
        assert turn.think_time_s == request.think_time
    assert [t.think_time_s for t in turns[:3]] == [0.0, 12.0, 8.0]
    # In this trace turn k's prompt extends turn k-1's: prefixes repeat as in production.
    for prev, cur in itertools.pairwise(turns):
        assert np.array_equal(cur.block_ids[: len(prev.block_ids)], prev.block_ids)


def test_equal_ids_in_two_files_do_not_share_tokens(traces_dir: Path) -> None:
    sessions = [s for _, s in zip(range(2), iter_kvtrace_sessions(traces_dir), strict=False)]
    first_a, first_b = next(sessions[0].turns()), next(sessions[1].turns())
    assert (first_a.block_ids[0] & np.uint64(0xFFFFFFFF)) == (first_b.block_ids[0] & np.uint64(0xFFFFFFFF)) == 1
    tm = TokenMap(tokens_per_block=4)
    assert not np.array_equal(tm.tokens(first_a.block_ids[:1]), tm.tokens(first_b.block_ids[:1]))


def test_token_map_is_deterministic_prefix_preserving_and_in_range() -> None:
    tm = TokenMap(tokens_per_block=64, seed=7, low=100, high=200)
    ids = np.array([5, 6, 7], np.uint64)
    tokens = tm.tokens(ids)
    assert tokens.shape == (192,)
    assert np.array_equal(tokens, TokenMap(tokens_per_block=64, seed=7, low=100, high=200).tokens(ids))
    assert np.array_equal(tm.tokens(ids[:2]), tokens[:128])
    assert tokens.min() >= 100 and tokens.max() < 200
    assert not np.array_equal(tokens[:64], tokens[64:128])  # different ids, different tokens
    assert not np.array_equal(TokenMap(64, seed=8, low=100, high=200).tokens(ids), tokens)


def test_scale_shrinks_blocks_and_rejects_nonsense() -> None:
    assert token_map_for_scale(1.0).tokens_per_block == 64
    assert token_map_for_scale(1 / 32).tokens_per_block == 2
    assert token_map_for_scale(0.001).tokens_per_block == 1
    with pytest.raises(ValueError, match="scale"):
        token_map_for_scale(0)


def test_fits_context_skips_long_sessions(traces_dir: Path) -> None:
    token_map = token_map_for_scale(1 / 64)  # one token per block
    choice = SourceChoice(kind="kvtrace", path=traces_dir, sessions=2, rounds=3)
    kept, refused = load_sessions(choice, fits_context(token_map, 1200, 16))
    assert len(kept) == 2
    for session in kept:
        assert max(len(t.block_ids) for t in session.turns()) + 16 <= 1200
    assert refused  # trace_0001's first prompt alone has 1,112 blocks, then grows past 1,184


def test_lmcache_jsonl_groups_sessions_in_order(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    lines = [
        {"session_id": "a", "input": [{"role": "user", "content": "hi"}], "output_length": 5, "pre_gap": 0},
        {"session_id": "b", "input": "solo", "output_length": 3, "pre_gap": 1.5},
        {"session_id": "a", "input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                      {"role": "user", "content": "more"}], "output_length": 7, "pre_gap": 2.0},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    sessions = load_lmcache_sessions(path)
    assert [s.session_id for s in sessions] == ["a", "b"]
    a_turns = list(sessions[0].turns())
    assert [t.max_tokens for t in a_turns] == [5, 7]
    assert [t.think_time_s for t in a_turns] == [0.0, 2.0]
    assert a_turns[1].messages[:1] == a_turns[0].messages
    assert sessions[1].steps[0].messages == ({"role": "user", "content": "solo"},)
    assert len(load_lmcache_sessions(path, limit=1, max_turns=1)[0].steps) == 1


def test_lmcache_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"session_id": "a", "input": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing output_length"):
        load_lmcache_sessions(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_lmcache_sessions(tmp_path / "nope.jsonl")


def test_synthetic_sessions_share_the_system_prefix_and_grow_per_turn() -> None:
    spec = SyntheticSpec(sessions=3, turns=4, shared_prefix_tokens=640, first_user_tokens=128,
                         growth_tokens=100, output_tokens=9, think_time_s=2.0)
    sessions = generate_sessions(spec)
    assert len(sessions) == 3
    firsts = [next(s.turns()) for s in sessions]
    assert all(np.array_equal(f.block_ids[:10], firsts[0].block_ids[:10]) for f in firsts)  # 640 tokens = 10 blocks
    assert not np.array_equal(firsts[0].block_ids[10:12], firsts[1].block_ids[10:12])
    turns = list(sessions[0].turns())
    assert [len(t.block_ids) for t in turns] == [12, 14, 16, 18]  # 100 tokens -> 2 blocks per turn
    assert [t.think_time_s for t in turns] == [0.0, 2.0, 2.0, 2.0]
    assert all(t.max_tokens == 9 for t in turns)
    for prev, cur in itertools.pairwise(turns):
        assert np.array_equal(cur.block_ids[: len(prev.block_ids)], prev.block_ids)
