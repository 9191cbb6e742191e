"""The replay schedule of ``lifeboatcache.traces`` flattened for simulation.

Block ids stay plain Python ints (unique across conversations) because the simulator's hot loop
hands them straight to ``dict``/``set`` and to the policies, which treat keys as opaque
hashables; building a ``BlockKey`` per reference would cost more than the simulation itself.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lifeboatcache.traces import BLOCK_TOKENS, Conversation, load_traces, schedule


@dataclass(frozen=True)
class Workload:
    """Requests in replay order: the block ids of each prompt, its prompt tokens and its stream."""

    blocks: list[list[int]]
    input_tokens: list[int]
    streams: list[str]  # the session (main agent or sub-agent) that sent each request
    times: list[float]  # seconds since the replay started
    block_tokens: int
    working_set: int  # distinct blocks over all requests
    #: when each request's response ended (its time + the recorded ``api_time``): an engine
    #: adapter that reports finished requests (vLLM's) touches the prompt's blocks then
    ends: list[float] | None = None

    @property
    def total_tokens(self) -> int:
        return sum(self.input_tokens)

    @property
    def references(self) -> int:
        return sum(len(b) for b in self.blocks)

    def capacity_blocks(self, fraction: float) -> int:
        """A tier size as a fraction of the working set, in blocks (at least one)."""
        return max(1, int(fraction * self.working_set))


def load_workload(directory: str | Path, *, seed: int = 0, spread_s: float = 3600.0,
                  limit: int | None = None) -> Workload:
    """Parse the traces in ``directory`` and lay them out on the fixed replay schedule."""
    return workload_of(load_traces(directory, limit=limit), seed=seed, spread_s=spread_s)


def workload_of(conversations: Sequence[Conversation], *, seed: int = 0, spread_s: float = 3600.0) -> Workload:
    """Lay parsed conversations (all, or one fold of them) out on the fixed replay schedule."""
    items = schedule(conversations, seed=seed, spread_s=spread_s)
    block_tokens = conversations[0].block_tokens if conversations else BLOCK_TOKENS
    arrays = [item.block_ids for item in items]
    working_set = int(np.unique(np.concatenate(arrays)).size) if arrays else 0
    return Workload(
        blocks=[a.tolist() for a in arrays],
        input_tokens=[item.request.input_tokens for item in items],
        streams=[item.stream_id for item in items],
        times=[item.time for item in items],
        block_tokens=block_tokens,
        working_set=working_set,
        ends=[item.time + item.request.api_time for item in items],
    )


def leading_run(blocks: Iterable[int], cached: Container[int]) -> int:
    """How many of a prompt's leading blocks are cached: a prompt hits only up to its first miss."""
    run = 0
    for block in blocks:
        if block not in cached:
            break
        run += 1
    return run
