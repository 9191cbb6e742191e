"""Pick a session source by name, and fit its sessions to a model's context."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from lifeboatcache.replay.kvtrace import iter_kvtrace_sessions
from lifeboatcache.replay.lmcache_jsonl import load_lmcache_sessions
from lifeboatcache.replay.sessions import Session, TokenMap
from lifeboatcache.replay.synthetic import SyntheticSpec, generate_sessions
from lifeboatcache.traces import BLOCK_TOKENS


@dataclass(frozen=True)
class SourceChoice:
    """Where sessions come from: ``kvtrace`` (path), ``lmcache`` (path) or ``synthetic``."""

    kind: str = "synthetic"
    path: Path | None = None
    sessions: int = 4
    rounds: int | None = None  # max turns per session (and per sub-agent)
    synthetic: SyntheticSpec | None = None


def load_sessions(choice: SourceChoice, accept: Callable[[Session], bool] | None = None
                  ) -> tuple[list[Session], list[str]]:
    """(the first ``choice.sessions`` sessions that ``accept`` takes, ids of those it refused).

    Trace files are read one at a time and only until enough sessions were accepted.
    """
    if choice.kind in ("kvtrace", "lmcache") and choice.path is None:
        raise ValueError(f"the {choice.kind} source needs a path (--traces / --lmcache-jsonl)")
    candidates: Iterable[Session]
    if choice.kind == "kvtrace":
        candidates = iter_kvtrace_sessions(choice.path, choice.rounds)  # type: ignore[arg-type]
    elif choice.kind == "lmcache":
        candidates = load_lmcache_sessions(choice.path, None, choice.rounds)  # type: ignore[arg-type]
    elif choice.kind == "synthetic":
        spec = choice.synthetic or SyntheticSpec()
        candidates = generate_sessions(spec.model_copy(update={"sessions": choice.sessions,
                                                               "turns": choice.rounds or spec.turns}))
    else:
        raise ValueError(f"unknown session source {choice.kind!r}: use kvtrace, lmcache or synthetic")
    kept: list[Session] = []
    refused: list[str] = []
    for session in candidates:
        if len(kept) >= choice.sessions:
            break
        if accept is None or accept(session):
            kept.append(session)
        else:
            refused.append(session.session_id)
    return kept, refused


def token_map_for_scale(scale: float, seed: int = 0) -> TokenMap:
    """A 64-token trace block becomes ``round(64 * scale)`` tokens (at least 1).

    Shrinking every block alike keeps each session's shape (shared prefixes, growth per turn,
    relative sizes) while making it fit a small model's context.
    """
    if not 0 < scale <= 1:
        raise ValueError(f"--scale must be in (0, 1], got {scale}")
    return TokenMap(tokens_per_block=max(1, round(BLOCK_TOKENS * scale)), seed=seed)


def longest_prompt_tokens(session: Session, token_map: TokenMap) -> int:
    """The largest prompt of the session and its sub-agents, in tokens (token-id turns only)."""
    return max((len(t.block_ids) * token_map.tokens_per_block for t in session.turns() if t.block_ids is not None),
               default=0)


def fits_context(token_map: TokenMap, context_tokens: int, output_tokens: int) -> Callable[[Session], bool]:
    """A filter for :func:`load_sessions`: every prompt plus its output fits ``context_tokens``."""
    return lambda session: longest_prompt_tokens(session, token_map) + output_tokens <= context_tokens
