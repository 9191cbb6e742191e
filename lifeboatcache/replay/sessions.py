"""The shape every session source produces, and the map from block ids to token ids.

A session is an ordered list of steps. A :class:`Turn` is one request; its prompt is a sequence
of block ids, and turn k's ids start with turn k-1's ids in the sources we replay, so prefixes
repeat exactly as they did in production. A :class:`Spawn` starts sub-agent sessions that run
concurrently; the parent's next turn waits for all of them.

Block ids become tokens through :class:`TokenMap`: a seeded hash of (block id, position) into
a token-id range, computed with numpy for a whole prompt at once. Equal ids give equal tokens,
so equal block-id prefixes give equal token prefixes (and equal engine block hashes).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

#: Token ids in [100, 32000) exist in every common vocabulary (Llama, Qwen, Mistral, SmolLM2)
#: and avoid the special tokens those keep at the start (ids < 20) or the end of the range.
DEFAULT_TOKEN_RANGE = (100, 32000)


@dataclass(frozen=True)
class Turn:
    """One request. Exactly one of ``block_ids`` (completions API) or ``messages`` (chat API)."""

    block_ids: np.ndarray | None = None
    messages: tuple[dict, ...] | None = None
    max_tokens: int = 32
    think_time_s: float = 0.0  # client delay before sending (the user/tool time in the trace)


@dataclass(frozen=True)
class Spawn:
    """Sub-agent sessions started together; the parent waits for all before its next turn."""

    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class Session:
    session_id: str
    steps: tuple[Turn | Spawn, ...] = field(default_factory=tuple)
    #: index of the first turn in ``steps``: a session split at a restart keeps its round numbers
    first_turn: int = 0

    def split_at_round(self, rounds: int) -> tuple[Session, Session]:
        """(turns ``[0, rounds)``, the rest), the same session id on both sides.

        A sub-agent spawn goes with the parent turn that follows it (a trailing spawn with the
        last part) and is not split: a sub-agent runs whole on the server that was up when its
        parent launched it.
        """
        head: list[Turn | Spawn] = []
        tail: list[Turn | Spawn] = []
        turns_seen = self.first_turn
        for step in self.steps:
            (head if turns_seen < rounds else tail).append(step)
            turns_seen += isinstance(step, Turn)
        if tail and isinstance(tail[-1], Spawn) and not any(isinstance(s, Turn) for s in tail):
            head += tail  # a trailing spawn after the last head turn stays with it
            tail = []
        return (Session(self.session_id, tuple(head), self.first_turn),
                Session(self.session_id, tuple(tail), max(rounds, self.first_turn)))

    def turns(self) -> Iterator[Turn]:
        """Every turn of this session and its sub-agents, depth first."""
        for step in self.steps:
            if isinstance(step, Turn):
                yield step
            else:
                for child in step.sessions:
                    yield from child.turns()

    def count_turns(self) -> int:
        return sum(1 for _ in self.turns())


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A fast, well-mixed 64-bit hash (uint64 arithmetic wraps, as intended)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class TokenMap:
    """Deterministic block id -> ``tokens_per_block`` token ids in ``[low, high)``."""

    tokens_per_block: int = 64
    seed: int = 0
    low: int = DEFAULT_TOKEN_RANGE[0]
    high: int = DEFAULT_TOKEN_RANGE[1]

    def __post_init__(self) -> None:
        if self.tokens_per_block < 1:
            raise ValueError(f"tokens_per_block must be >= 1, got {self.tokens_per_block}")
        if not 0 <= self.low < self.high:
            raise ValueError(f"token range [{self.low}, {self.high}) is empty or negative")

    def tokens(self, block_ids: np.ndarray) -> np.ndarray:
        """Token ids (int64) for a prompt made of ``block_ids``, ``tokens_per_block`` each."""
        ids = np.asarray(block_ids, dtype=np.uint64)
        positions = np.arange(self.tokens_per_block, dtype=np.uint64)
        with np.errstate(over="ignore"):
            keyed = _splitmix64(ids ^ np.uint64(_splitmix64(np.array([self.seed], np.uint64))[0]))
            mixed = _splitmix64(keyed[:, None] + positions[None, :])
        span = np.uint64(self.high - self.low)
        return (mixed % span).astype(np.int64).ravel() + self.low


def scoped_block_ids(scope: str, ids: list[int] | np.ndarray) -> np.ndarray:
    """Make a source's block ids unique across sources: ``crc32(scope) << 32 | id``.

    kv-cache-tester ids are local to one conversation file (every file starts at 1), so two
    files must not share prefixes by accident; sub-agents of one file share its scope.
    """
    arr = np.asarray(ids, dtype=np.uint64)
    if arr.size and int(arr.max()) >= 1 << 32:
        raise ValueError(f"block id {int(arr.max())} in {scope!r} does not fit in 32 bits")
    return arr | np.uint64(zlib.crc32(scope.encode()) << 32)
