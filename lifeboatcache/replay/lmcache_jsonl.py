"""Sessions from LMCache's agentic traces (JSONL, one request per line).

Each line holds ``session_id``, ``input`` (the chat messages sent, i.e. the whole context so
far), ``output_length`` and ``pre_gap`` (seconds the client waited before sending). Lines of a
session keep their file order. These replay through the chat API so the server's own chat
template renders them; the messages of step k extend those of step k-1 as in the recording.
"""

from __future__ import annotations

import json
from pathlib import Path

from lifeboatcache.replay.sessions import Session, Turn

REQUIRED_FIELDS = ("session_id", "input", "output_length")


def _messages(value: object, where: str) -> tuple[dict, ...]:
    if isinstance(value, str):
        return ({"role": "user", "content": value},)
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return tuple(value)
    raise ValueError(f"{where}: 'input' must be a list of chat messages ({{'role', 'content'}}) or a string")


def load_lmcache_sessions(path: Path, limit: int | None = None, max_turns: int | None = None) -> list[Session]:
    """Group the lines of ``path`` by ``session_id``, in order of first appearance."""
    if not path.is_file():
        raise FileNotFoundError(f"LMCache agentic trace {path} does not exist (expected a .jsonl file)")
    turns: dict[str, list[Turn]] = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg}); each line must be one request object") from exc
            missing = [name for name in REQUIRED_FIELDS if name not in record]
            if missing:
                raise ValueError(f"{where}: missing {', '.join(missing)}; each line needs {', '.join(REQUIRED_FIELDS)}")
            session_turns = turns.setdefault(str(record["session_id"]), [])
            if max_turns is not None and len(session_turns) >= max_turns:
                continue
            session_turns.append(Turn(messages=_messages(record["input"], where),
                                      max_tokens=max(1, int(record["output_length"])),
                                      think_time_s=float(record.get("pre_gap") or 0.0)))
    sessions = [Session(sid, tuple(ts)) for sid, ts in turns.items()]
    return sessions[:limit] if limit is not None else sessions
