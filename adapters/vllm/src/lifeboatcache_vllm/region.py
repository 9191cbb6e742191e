"""vLLM's CPU tier on the CPU backend, as a /dev/shm file that no exit path leaves behind.

vLLM keeps its CPU tier (``cpu_bytes_to_use``, our ``engine.vllm.native_cpu_gb``) in
``/dev/shm/vllm_offload_<engine id>.mmap`` (``SharedOffloadRegion``). The workers map it to
copy KV pages; EngineCore's tiering manager maps it afterwards *by name* and hands it to the
secondary tiers as ``primary_kv_view`` (``LifeboatTier`` reads and writes chunks there). The
file's creator, a worker, unlinks it in ``cleanup()``, and only there: vLLM's plain CPU spec
passes a barrier so the name is dropped once every worker has mapped it, but the tiering spec
cannot (the scheduler still has to open the file), so it passes none. Ctrl-C, SIGTERM, SIGKILL
and crashes all end the worker without that cleanup, and the file keeps its RAM until reboot.

- :func:`drop_name`: the scheduler side unlinks the name as soon as it has mapped the file.
  It is the last mapper: EngineCore builds the scheduler only after every worker registered its
  KV caches. Mappings outlive the name, so nothing changes for the running engine, and the kernel
  frees the memory when the last process mapping it exits, however it exits.
- :class:`WorkerRegion`: the workers' region. Every worker holds a shared ``flock`` on the file
  while it lives, and the creator marks the file (``S_ISVTX``, unused on plain files) once it
  holds that lock. A marked file nobody holds a lock on belongs to an engine that died before
  its name was dropped (killed during start-up): provably dead.
- :func:`sweep_dead_regions`: removes those at start-up. An unmarked file (stock vLLM, or
  lifeboatcache before this change) may belong to a live engine, e.g. in another PID namespace
  sharing /dev/shm, so it is never removed; when such files leave too little room they are
  named in a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os
import shutil
import stat
from typing import Any

from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion

log = logging.getLogger("lifeboatcache.vllm")

SHM_DIR = "/dev/shm"


def region_path(engine_id: str) -> str:
    """The file of ``engine_id``'s region (``SharedOffloadRegion``'s own naming)."""
    return os.path.join(SHM_DIR, f"vllm_offload_{engine_id}.mmap")


def drop_name(path: str) -> None:
    """Unlink a region file every process of the engine has mapped; its memory lives on in them."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        log.info("lifeboatcache: unlinked %s once mapped: its memory goes with the engine's last process", path)


class WorkerRegion(SharedOffloadRegion):
    """A worker's ``SharedOffloadRegion`` that holds the liveness lock and owns the unlink itself.

    vLLM's ``cleanup()`` logs a traceback when the name it created is gone, and it usually is
    (:func:`drop_name`), so the creator takes the unlink over and tolerates that.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._owns_name = bool(getattr(self, "_creator", False))
        self._creator = False
        try:
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # released by the kernel with the fd, on any exit
            if self._owns_name:
                os.fchmod(self.fd, stat.S_IMODE(os.fstat(self.fd).st_mode) | stat.S_ISVTX)
        except BaseException:
            self.cleanup()
            raise

    def cleanup(self) -> None:
        super().cleanup()
        if self._owns_name:
            self._owns_name = False
            drop_name(self.mmap_path)


def sweep_dead_regions(needed_bytes: int) -> None:
    """Remove region files of engines that provably died before dropping the name (module doc)."""
    unknown: list[str] = []
    for path in sorted(glob.glob(region_path("*"))):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not ours to open
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or not info.st_mode & stat.S_ISVTX:
                unknown.append(path)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live worker holds it
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == info.st_ino:
                    os.unlink(path)
                    log.info("lifeboatcache: removed %s (%.2f GB) of an engine that died starting", path,
                             info.st_size / 1e9)
        finally:
            os.close(fd)
    free = shutil.disk_usage(SHM_DIR).free
    if unknown and free < needed_bytes:
        log.warning("lifeboatcache: vLLM's CPU tier needs %.2f GB in %s, %.2f GB are free; these offload "
                    "files may be left by stopped servers (stock vLLM, or an older lifeboatcache); remove "
                    "those of no running vLLM by hand: %s", needed_bytes / 1e9, SHM_DIR, free / 1e9,
                    " ".join(unknown))
