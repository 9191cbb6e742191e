"""Trace parsing and the fixed replay schedule, on the real kv-cache-tester files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lifeboatcache.traces import CONVERSATION_SHIFT, load_conversation, load_traces, schedule, trace_files


def test_conversation_has_block_ids_for_its_prompt_tokens(traces_dir: Path) -> None:
    conv = load_conversation(traces_dir / "trace_0001.json.gz")
    assert conv.id == "trace_0001" and conv.block_tokens == 64 and len(conv.streams) == 1
    for request in conv.streams[0].requests:
        assert request.blocks == request.input_tokens // 64  # full blocks only
    first, second = conv.streams[0].requests[:2]
    assert np.array_equal(first.hash_ids[:5], second.hash_ids[:5])  # the session's prefix repeats


def test_subagent_is_its_own_stream_on_its_parents_clock(traces_dir: Path) -> None:
    conv = load_conversation(traces_dir / "trace_0020.json.gz")  # launches agent_001 at t=225.501
    main, agent = conv.streams[0], conv.streams[1]
    assert agent.stream_id == "trace_0020/agent_001" and agent.parent_id == "trace_0020"
    assert agent.start == pytest.approx(225.501)
    assert agent.requests[0].t == pytest.approx(225.501)
    assert agent.requests[0].hash_ids[0] != main.requests[0].hash_ids[0]
    assert all(a.t <= b.t for a, b in zip(agent.requests, agent.requests[1:], strict=False))


def test_schedule_is_seeded_ordered_and_keeps_files_apart(traces_dir: Path) -> None:
    conversations = load_traces(traces_dir, limit=4)
    items = schedule(conversations, seed=3)
    again = schedule(conversations, seed=3)
    assert [(i.time, i.stream_id) for i in items] == [(i.time, i.stream_id) for i in again]
    assert [i.time for i in items] == sorted(i.time for i in items)
    starts = {}
    for item in items:
        starts.setdefault(item.conversation, item.time)
    assert all(0 <= t < 3600 for t in starts.values())
    assert [i.time for i in schedule(conversations, seed=4)] != [i.time for i in items]
    # every file's ids start at 1: the conversation index keeps them apart
    firsts = {int(i.block_ids[0]) >> CONVERSATION_SHIFT for i in items if i.block_ids.size}
    assert firsts == {0, 1, 2, 3}
    assert len(items) == sum(c.requests for c in conversations)


def test_empty_directory_says_where_traces_are_expected(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace files"):
        trace_files(tmp_path)
