"""Synthetic agent sessions shaped like the real traces, for users without trace files.

Defaults are the medians of the 150 kv-cache-tester conversations (../shared/traces):
system 2,826 + tools 12,290 tokens shared by every session, a first user context of 9,790
tokens, 683 tokens appended per turn, 219 output tokens, 11 s think time, 41 turns. Prompts
are built from 64-token blocks like the traces, so ``--scale`` shrinks both sources alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from lifeboatcache.replay.sessions import Session, Turn, scoped_block_ids
from lifeboatcache.traces import BLOCK_TOKENS


class SyntheticSpec(BaseModel):
    """What each generated session looks like (token counts are before ``--scale``)."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(4, ge=1)
    turns: int = Field(41, ge=1)
    shared_prefix_tokens: int = Field(2826 + 12290, ge=0, description="system prompt + tool definitions")
    first_user_tokens: int = Field(9790, ge=0)
    growth_tokens: int = Field(683, ge=0, description="tokens appended per turn (tool results, answers)")
    output_tokens: int = Field(219, ge=1)
    think_time_s: float = Field(11.0, ge=0)
    seed: int = 0


@dataclass
class _BlockCounter:
    """Hands out fresh block ids for one session."""

    next_id: int = 1

    def take(self, count: int) -> np.ndarray:
        ids = np.arange(self.next_id, self.next_id + count, dtype=np.uint64)
        self.next_id += count
        return ids


def _blocks(tokens: int) -> int:
    return math.ceil(tokens / BLOCK_TOKENS)


def generate_sessions(spec: SyntheticSpec) -> list[Session]:
    """``spec.sessions`` sessions; all share the system/tool blocks, each grows its own context."""
    shared = scoped_block_ids(f"synthetic-shared-{spec.seed}", np.arange(1, _blocks(spec.shared_prefix_tokens) + 1))
    sessions = []
    for index in range(spec.sessions):
        scope = f"synthetic-{spec.seed}-{index}"
        counter = _BlockCounter()
        prompt = np.concatenate([shared, scoped_block_ids(scope, counter.take(_blocks(spec.first_user_tokens)))])
        turns = []
        for turn in range(spec.turns):
            if turn and spec.growth_tokens:
                grown = scoped_block_ids(scope, counter.take(_blocks(spec.growth_tokens)))
                prompt = np.concatenate([prompt, grown])
            turns.append(Turn(block_ids=prompt, max_tokens=spec.output_tokens,
                              think_time_s=spec.think_time_s if turn else 0.0))
        sessions.append(Session(f"synthetic-{index}", tuple(turns)))
    return sessions
