"""What one replayed request leaves behind."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are seconds on the client's monotonic clock.

    ``error`` is a short machine-readable reason (``unreachable``, ``context_too_long``,
    ``http_500``, ``timeout``, ``stream_error``); ``error_detail`` is the server's words.
    """

    session_id: str
    turn: int  # 0-based index of the turn within its session
    start_s: float
    prompt_tokens: int = 0  # as sent (completions API) or as the server counted (usage)
    end_s: float = 0.0
    ttft_s: float | None = None
    output_tokens: int = 0
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when the server reports it
    chunk_gaps_s: list[float] = field(default_factory=list)
    error: str | None = None
    error_detail: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return asdict(self)
