"""``--disk-gb``: each cell's tier directory on a filesystem of its own, so a small disk fills up.

A bounded disk is what a tier meets in production: the question is whether it keeps serving
(stores refused or evicted, the engine unharmed) when the run's KV does not fit. The grid
mounts a tmpfs of exactly ``size_gb`` on the cell's tier directory before the server starts
and unmounts it when the cell ends, also on an error or Ctrl-C, so every configuration gets
the same empty, equally small disk. tmpfs, not a loop-mounted image: it needs no mkfs or
loop device (containers and CI runners often have neither), and its size is a hard limit
with the same ENOSPC a full disk gives. Mounting needs root (or CAP_SYS_ADMIN).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

GIB = 1024**3


class DiskError(RuntimeError):
    """The cell's filesystem could not be mounted (not permitted, no ``mount``) or unmounted."""


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def disk_usage(directory: Path) -> dict[str, int]:
    """What ``df`` says for the filesystem holding ``directory``: total, used and free bytes."""
    usage = shutil.disk_usage(directory)
    return {"total_bytes": usage.total, "used_bytes": usage.used, "free_bytes": usage.free}


def mount_tmpfs(directory: Path, size_gb: float) -> None:
    """Mount a tmpfs of ``size_gb`` GiB on ``directory`` (created if needed); DiskError if not allowed."""
    size = int(size_gb * GIB)
    if size < 4096:
        raise DiskError(f"--disk-gb {size_gb:g} is below one 4 KiB page")
    directory.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        raise DiskError("--disk-gb needs the mount command (util-linux)")
    done = _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(directory)])
    if done.returncode != 0:
        hint = "" if os.geteuid() == 0 else " (run as root, or with CAP_SYS_ADMIN)"
        raise DiskError(f"--disk-gb: cannot mount a {size_gb:g} GiB tmpfs on {directory}{hint}: "
                        f"{(done.stderr or done.stdout).strip() or f'mount exited with {done.returncode}'}")


def unmount(directory: Path) -> None:
    """Unmount ``directory``; a busy mount (a straggling child) is detached lazily rather than left."""
    done = _run(["umount", str(directory)])
    if done.returncode != 0 and os.path.ismount(directory):
        lazy = _run(["umount", "-l", str(directory)])
        if lazy.returncode != 0:
            raise DiskError(f"cannot unmount {directory}: {(lazy.stderr or done.stderr).strip()}")


@contextmanager
def cell_disk(directory: Path, size_gb: float | None) -> Iterator[Path]:
    """``directory`` on a fresh ``size_gb`` GiB tmpfs for the ``with`` body (no mount when None)."""
    if not size_gb:
        directory.mkdir(parents=True, exist_ok=True)
        yield directory
        return
    mount_tmpfs(directory, size_gb)
    try:
        yield directory
    finally:  # also on KeyboardInterrupt: never leave a mount behind
        unmount(directory)
