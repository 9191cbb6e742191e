"""Sessions from kv-cache-tester traces (../shared/traces/README.md), parsed by ``lifeboatcache.traces``.

A conversation's main stream becomes a session; each sub-agent stream becomes a child session
started after the last parent request sent before the sub-agent began. Sub-agents that start
in the same gap between two parent requests were launched together: they form one
:class:`Spawn`, replay concurrently, and the parent's next request waits for them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from lifeboatcache.replay.sessions import Session, Spawn, Turn, scoped_block_ids
from lifeboatcache.traces import Conversation, TraceStream, load_conversation, trace_files


def _session(stream: TraceStream, children: dict[str, list[TraceStream]], scope: str,
             max_turns: int | None) -> Session:
    requests = stream.requests[:max_turns] if max_turns is not None else stream.requests
    spawns_after: dict[int, list[Session]] = defaultdict(list)  # number of parent turns sent before
    for child in children.get(stream.stream_id, ()):
        sent_before = sum(1 for r in stream.requests if r.t <= child.start)
        if max_turns is None or sent_before < max_turns:
            spawns_after[sent_before].append(_session(child, children, scope, max_turns))
    steps: list[Turn | Spawn] = []
    for index, request in enumerate(requests):
        if spawns_after.get(index):
            steps.append(Spawn(tuple(spawns_after[index])))
        steps.append(Turn(block_ids=scoped_block_ids(scope, request.hash_ids),
                          max_tokens=max(1, request.output_tokens), think_time_s=request.think_time))
    if spawns_after.get(len(requests)):
        steps.append(Spawn(tuple(spawns_after[len(requests)])))
    return Session(stream.stream_id, tuple(steps))


def session_from_conversation(conversation: Conversation, max_turns: int | None = None) -> Session:
    """The conversation as one session; ``max_turns`` caps its turns and each sub-agent's.

    Block ids are scoped by the conversation id: they are local to their file.
    """
    children: dict[str, list[TraceStream]] = defaultdict(list)
    roots = []
    for stream in conversation.streams:
        if stream.parent_id is None:
            roots.append(stream)
        else:
            children[stream.parent_id].append(stream)
    if len(roots) != 1:
        raise ValueError(f"{conversation.path}: expected one main stream, found {len(roots)}")
    return _session(roots[0], children, conversation.id, max_turns)


def iter_kvtrace_sessions(path: Path, max_turns: int | None = None):
    """Sessions of ``path`` (one trace file, or a directory of them in name order), read lazily."""
    files = trace_files(path) if path.is_dir() else [path]
    for file in files:
        if not file.exists():
            raise FileNotFoundError(f"trace {file} does not exist: pass a .json.gz file or a directory")
        yield session_from_conversation(load_conversation(file), max_turns)
