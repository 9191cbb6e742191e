"""Which processes of a process group are still running: for tests that stop servers by group."""

from __future__ import annotations

import time
from pathlib import Path


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in process group ``pgid``.

    Zombies do not count: an orphan's zombie may wait for a reaper that a container lacks."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def wait_group_gone(pgid: int, timeout: float, poll_s: float = 0.5) -> bool:
    """True once no process of group ``pgid`` runs; False if some still do after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
