"""Our threads as the kernel sees them: names and CPU time.

Python 3.11 names threads for Python only; the kernel (``top -H``, ``/proc``, ``perf``) sees
every thread of an engine process under the engine's name. Our pools name their threads for
the kernel too, and :func:`thread_cpu_seconds` sums what our live threads have cost, so an
adapter can report our CPU beside the engine's (on a 2-core host every second of ours is a
second taken from the engine's forward passes).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

#: prefix of every thread lifeboatcache starts (Python name)
THREAD_PREFIX = "lifeboat"
_PR_SET_NAME = 15
_libc: ctypes.CDLL | None = None


def name_os_thread(name: str) -> None:
    """Give the calling thread a kernel-visible name (at most 15 bytes kept); never raises."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # not Linux, or no prctl: names are cosmetic
        pass


def lower_thread_priority(by: int) -> bool:
    """Raise the calling thread's nice value by ``by`` (at most to 19); False where it cannot.

    On Linux ``setpriority(PRIO_PROCESS, tid)`` applies to the one thread, so a pool's threads
    can yield to the engine's without touching the engine. Raising a nice value needs no
    privilege; it cannot be undone without one, so only threads that stay background get it.
    """
    if by <= 0 or sys.platform != "linux":
        return False
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError:
        return False
    return True


def start_background_thread(name: str, nice: int) -> None:
    """Initializer of a pool whose work nothing waits on: a kernel-visible name and a lower priority."""
    name_os_thread(name)
    lower_thread_priority(nice)


def _task_cpu_seconds(tid: int | str, tick: int) -> float | None:
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime, in clock ticks


def thread_cpu_seconds(prefix: str = THREAD_PREFIX) -> float:
    """User + system CPU seconds of this process's live threads whose Python name starts with ``prefix``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith(prefix) and thread.native_id is not None:
            total += _task_cpu_seconds(thread.native_id, tick) or 0.0
    return total


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this whole process (every thread, the engine's included)."""
    times = os.times()
    return times.user + times.system
