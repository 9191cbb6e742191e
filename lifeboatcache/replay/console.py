"""Run a replay with a rich progress bar (shared by ``replay``, ``grid`` and ``demo``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lifeboatcache.replay.client import Endpoint
from lifeboatcache.replay.records import RequestRecord
from lifeboatcache.replay.runner import ReplayOptions, ReplayResult, replay
from lifeboatcache.replay.sessions import Session


def replay_with_progress(sessions: Sequence[Session], endpoint: Endpoint, options: ReplayOptions,
                         console: Console, label: str = "replay") -> ReplayResult:
    total = sum(session.count_turns() for session in sessions)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[status]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(label, total=total, status="")
        failed = 0

        def on_record(record: RequestRecord) -> None:
            nonlocal failed
            failed += not record.ok
            ttft = f"last TTFT {record.ttft_s:.2f}s" if record.ttft_s is not None else f"last: {record.error}"
            progress.update(task, advance=1, status=f"{ttft}, failed {failed}")

        return asyncio.run(replay(sessions, endpoint, options, on_record))
