"""Drive N concurrent agents through their sessions against one endpoint.

Agents take top-level sessions from a queue, one at a time, and replay them turn by turn
(each turn waits for the previous answer, then the scaled think time). Sub-agents run as
extra concurrent sessions, as the traced client ran them; the parent waits for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from lifeboatcache.replay.client import Endpoint, scrape_counters, send_request
from lifeboatcache.replay.records import RequestRecord
from lifeboatcache.replay.sessions import Session, Spawn, TokenMap, Turn

#: vLLM counters (tokens) read before and after a run; their deltas are the run's cache hits.
SERVER_COUNTERS = ("vllm:prompt_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                   "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits",
                   "vllm:prompt_tokens_cached_by_source",
                   # vLLM's tiering manager: jobs into / out of the tier below its CPU tier that failed
                   "vllm:kv_offload_tiering_cascade_job_failures", "vllm:kv_offload_tiering_promotion_job_failures")
#: counters also read per value of one label: cached prompt tokens per cache tier that supplied them
SERVER_COUNTER_SPLITS = {"vllm:prompt_tokens_cached_by_source": "source"}


@dataclass(frozen=True)
class ReplayOptions:
    agents: int = 4
    max_tokens: int | None = 32  # the same for every request (equal work); None keeps the source's
    think_scale: float = 0.0  # multiplies each turn's think time; 0 sends back to back
    token_map: TokenMap = field(default_factory=TokenMap)
    max_connections: int = 256


@dataclass
class ReplayResult:
    records: list[RequestRecord]
    wall_s: float
    counters_before: dict[str, float]
    counters_after: dict[str, float]

    def counter_delta(self, name: str) -> float | None:
        if name not in self.counters_after:
            return None
        return self.counters_after[name] - self.counters_before.get(name, 0.0)


def merge_results(parts: Sequence[ReplayResult]) -> ReplayResult:
    """One result from replays against successive servers (a restart between rounds).

    Records are concatenated in order; wall time is the sum of the replays' own (the restart's
    downtime is not serving time); each counter is the sum of its per-server deltas, because
    a fresh server process starts its counters at zero.
    """
    deltas: dict[str, float] = {}
    for part in parts:
        for name in part.counters_after:
            deltas[name] = deltas.get(name, 0.0) + (part.counter_delta(name) or 0.0)
    return ReplayResult([r for part in parts for r in part.records], sum(p.wall_s for p in parts), {}, deltas)


class _Replayer:
    def __init__(self, http: aiohttp.ClientSession, endpoint: Endpoint, options: ReplayOptions,
                 on_record: Callable[[RequestRecord], None] | None) -> None:
        self.http, self.endpoint, self.options, self.on_record = http, endpoint, options, on_record
        self.records: list[RequestRecord] = []

    async def turn(self, session_id: str, index: int, turn: Turn) -> None:
        if turn.think_time_s and self.options.think_scale:
            await asyncio.sleep(turn.think_time_s * self.options.think_scale)
        prompt = None
        if turn.block_ids is not None:
            prompt = self.options.token_map.tokens(turn.block_ids).tolist()
        record = RequestRecord(session_id=session_id, turn=index, start_s=0.0,
                               prompt_tokens=len(prompt) if prompt is not None else 0)
        max_tokens = self.options.max_tokens or turn.max_tokens
        await send_request(self.http, self.endpoint, record, prompt, turn.messages, max_tokens)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    async def session(self, session: Session) -> None:
        index = session.first_turn
        for step in session.steps:
            if isinstance(step, Spawn):
                await asyncio.gather(*(self.session(child) for child in step.sessions))
            else:
                await self.turn(session.session_id, index, step)
                index += 1

    async def agent(self, queue: asyncio.Queue[Session]) -> None:
        while True:
            try:
                session = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await self.session(session)


async def replay(sessions: Sequence[Session], endpoint: Endpoint, options: ReplayOptions,
                 on_record: Callable[[RequestRecord], None] | None = None) -> ReplayResult:
    """Replay ``sessions`` with ``options.agents`` concurrent agents; never raises for a failed request."""
    if options.agents < 1:
        raise ValueError(f"agents must be >= 1, got {options.agents}")
    queue: asyncio.Queue[Session] = asyncio.Queue()
    for session in sessions:
        queue.put_nowait(session)
    connector = aiohttp.TCPConnector(limit=options.max_connections)
    async with aiohttp.ClientSession(connector=connector) as http:
        before = await scrape_counters(http, endpoint.base_url, SERVER_COUNTERS, SERVER_COUNTER_SPLITS)
        replayer = _Replayer(http, endpoint, options, on_record)
        started = time.perf_counter()
        await asyncio.gather(*(replayer.agent(queue) for _ in range(min(options.agents, len(sessions)))))
        wall_s = time.perf_counter() - started
        after = await scrape_counters(http, endpoint.base_url, SERVER_COUNTERS, SERVER_COUNTER_SPLITS)
    replayer.records.sort(key=lambda r: r.start_s)
    return ReplayResult(replayer.records, wall_s, before, after)
