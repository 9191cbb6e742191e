"""Real agentic-coding traces (kv-cache-tester format): files → conversations → streams → requests.

One module, one job: parse the gzipped JSON traces in ``../shared/traces/kv-cache-tester`` and
lay them out on a fixed replay schedule. The simulator (``lifeboatcache.sim``), the sizing
advisor and the engine replay harness all read traces through this API, so they replay the
same requests at the same times.

API::

    from lifeboatcache.traces import load_traces, schedule

    conversations = load_traces("../shared/traces/kv-cache-tester")   # sorted by file name
    for item in schedule(conversations, seed=0):                      # ordered by item.time
        item.time            # seconds since the replay started
        item.stream_id       # "trace_0020" or "trace_0020/agent_001" (a sub-agent)
        item.request.hash_ids       # per-file ids of the 64-token input blocks (int64 array)
        item.block_ids       # the same ids made unique across files (conversation index << 40)
        item.request.input_tokens, item.request.output_tokens

Replay rules (issue 8, fixed so results compare): every conversation starts at a seeded uniform
offset in ``[0, spread_s)``; requests then follow their own timestamps; a sub-agent is a
separate stream whose requests are shifted by the sub-agent's start time in its parent.
Request types ``n`` (normal) and ``s`` (streamed) are both plain requests of their stream.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: tokens per block in the kv-cache-tester format (each hash id covers this many input tokens)
BLOCK_TOKENS = 64
#: bits reserved for a file's own hash ids when ids are made unique across conversations
CONVERSATION_SHIFT = 40


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request to the model. ``t`` is seconds since its *conversation* started."""

    t: float
    input_tokens: int
    output_tokens: int
    hash_ids: np.ndarray  # int64, one id per full block of the input, in prompt order
    kind: str = "n"
    think_time: float = 0.0  # client delay before this request (seconds), as recorded
    api_time: float = 0.0  # seconds from the request to the end of its response, as recorded

    @property
    def blocks(self) -> int:
        return len(self.hash_ids)


@dataclass(frozen=True, slots=True)
class TraceStream:
    """The requests of one agent (the main session or one sub-agent), in time order."""

    stream_id: str
    parent_id: str | None
    start: float
    requests: tuple[TraceRequest, ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    """One trace file: a main stream plus its sub-agents (flattened, any nesting depth)."""

    id: str
    path: Path
    block_tokens: int
    hash_id_scope: str
    streams: tuple[TraceStream, ...]

    @property
    def requests(self) -> int:
        return sum(len(s.requests) for s in self.streams)

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for s in self.streams for r in s.requests)


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    """A request placed on the replay clock."""

    time: float
    conversation: int  # index into the list given to ``schedule``
    stream_id: str
    request: TraceRequest
    block_ids: np.ndarray  # hash ids made unique across conversations


def _parse_request(raw: dict[str, Any], offset: float) -> TraceRequest:
    return TraceRequest(
        t=offset + float(raw.get("t", 0.0)),
        input_tokens=int(raw.get("in", 0)),
        output_tokens=int(raw.get("out", 0)),
        hash_ids=np.asarray(raw.get("hash_ids", ()), dtype=np.int64),
        kind=str(raw.get("type", "n")),
        think_time=float(raw.get("think_time") or 0.0),
        api_time=float(raw.get("api_time") or 0.0),
    )


def _collect_streams(
    stream_id: str, parent_id: str | None, start: float, raw_requests: Sequence[dict[str, Any]],
    out: list[TraceStream],
) -> None:
    """Append the stream ``stream_id`` and, recursively, the sub-agents it launches."""
    requests: list[TraceRequest] = []
    own_index = len(out)
    out.append(TraceStream(stream_id, parent_id, start, ()))  # placeholder keeps parents first
    for raw in raw_requests:
        if raw.get("type") == "subagent":
            agent = str(raw.get("agent_id") or f"agent_{len(out):03d}")
            _collect_streams(f"{stream_id}/{agent}", stream_id, start + float(raw.get("t", 0.0)),
                             raw.get("requests", ()), out)
        else:
            requests.append(_parse_request(raw, start))
    requests.sort(key=lambda r: r.t)
    out[own_index] = TraceStream(stream_id, parent_id, start, tuple(requests))


def load_conversation(path: str | Path) -> Conversation:
    """Parse one ``*.json.gz`` (or plain ``*.json``) trace file."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    block_tokens = int(data.get("block_size", BLOCK_TOKENS))
    conversation_id = str(data.get("id") or path.name.split(".")[0])
    streams: list[TraceStream] = []
    _collect_streams(conversation_id, None, 0.0, data.get("requests", ()), streams)
    return Conversation(conversation_id, path, block_tokens, str(data.get("hash_id_scope", "local")),
                        tuple(streams))


def trace_files(directory: str | Path) -> list[Path]:
    """The trace files of ``directory`` in name order; raise if there are none."""
    directory = Path(directory)
    files = sorted(p for p in directory.iterdir() if p.name.endswith((".json.gz", ".json")))
    if not files:
        raise FileNotFoundError(
            f"no trace files (*.json.gz) in {directory}: point --traces at a kv-cache-tester "
            f"directory such as ../shared/traces/kv-cache-tester"
        )
    return files


def load_traces(directory: str | Path, limit: int | None = None) -> list[Conversation]:
    """Every conversation in ``directory`` (the first ``limit`` files by name, if given)."""
    files = trace_files(directory)
    return [load_conversation(p) for p in files[:limit]]


def start_offsets(count: int, *, seed: int = 0, spread_s: float = 3600.0) -> np.ndarray:
    """The seeded uniform start offsets of ``count`` conversations (seconds)."""
    return np.random.default_rng(seed).uniform(0.0, spread_s, count)


def schedule(
    conversations: Iterable[Conversation], *, seed: int = 0, spread_s: float = 3600.0
) -> list[ScheduledRequest]:
    """All requests of all conversations on one clock, ordered by time (ties: file, stream order)."""
    conversations = list(conversations)
    offsets = start_offsets(len(conversations), seed=seed, spread_s=spread_s)
    keyed: list[tuple[float, int, int, int, ScheduledRequest]] = []
    for ci, (conversation, offset) in enumerate(zip(conversations, offsets, strict=True)):
        base = np.int64(ci) << np.int64(CONVERSATION_SHIFT)
        for si, stream in enumerate(conversation.streams):
            for ri, request in enumerate(stream.requests):
                item = ScheduledRequest(float(offset) + request.t, ci, stream.stream_id, request,
                                        request.hash_ids + base)
                keyed.append((item.time, ci, si, ri, item))
    keyed.sort(key=lambda k: k[:4])
    return [k[4] for k in keyed]


def iter_block_ids(items: Iterable[ScheduledRequest]) -> Iterator[np.ndarray]:
    """The block ids of each scheduled request, in order (a convenience for simulators)."""
    for item in items:
        yield item.block_ids
