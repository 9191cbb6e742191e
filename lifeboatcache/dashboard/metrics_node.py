"""One metrics endpoint per node: engine processes spool their samples, one process serves all.

Several engine processes on a node (tensor-parallel workers, several servers) each hold their
own TieredCache. Each process that starts the dashboard runs a :class:`SamplePublisher` that
writes its merged sample to ``<spool>/<pid>.json`` once a second (write + rename). The process
that owns the port serves :class:`NodeCollector`: its own live caches plus every fresh spool
file of a live process, merged by :func:`~lifeboatcache_core.metrics.merge_samples`. Files of
dead processes are removed; stale files (older than ``max_age_s``) are ignored.

Unlike prometheus_client's multiprocess mode this needs no environment variable set before
the engine starts and keeps the hot path free of mmap writes: samples are built at 1 Hz.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lifeboatcache_core.metrics import Sample, families, merge_samples, process_samples
from prometheus_client.registry import Collector

log = logging.getLogger("lifeboatcache")

ENV_SPOOL = "LIFEBOAT_METRICS_DIR"
#: bumped when the sample layout changes: a process of another version is left out, not mis-added
SAMPLE_FORMAT = 1
DEFAULT_MAX_AGE_S = 30.0


def spool_dir() -> Path:
    """``$LIFEBOAT_METRICS_DIR``, else a per-user directory in /dev/shm (or the temp dir)."""
    env = os.environ.get(ENV_SPOOL)
    if env:
        return Path(env)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"lifeboatcache-metrics-{os.getuid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def write_sample(directory: Path, sample: Sample, pid: int | None = None) -> Path:
    """Atomically write ``sample`` as ``<directory>/<pid>.json``.

    The partial file is the writing thread's own: two publishers of one process (two caches
    opened with a dashboard each, as several vLLM tiers in one test process do) would otherwise
    rename a partial the other had already moved, and the loser warned once and went quiet.
    """
    pid = os.getpid() if pid is None else pid
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = directory / f"{pid}.json"
    partial = directory / f".{pid}.{threading.get_ident()}.json.partial"
    partial.write_text(json.dumps({"format": SAMPLE_FORMAT, "pid": pid, "written_at": time.time(), "sample": sample}))
    os.replace(partial, final)
    return final


def read_node_samples(directory: Path, *, exclude_pid: int | None = None,
                      max_age_s: float = DEFAULT_MAX_AGE_S) -> list[Sample]:
    """Samples spooled by live processes of this node (not ``exclude_pid``); dead ones are cleaned up."""
    out: list[Sample] = []
    try:
        paths = list(directory.glob("*.json"))
    except OSError:
        return out
    now = time.time()
    for path in paths:
        try:
            pid = int(path.stem)
        except ValueError:
            continue
        if pid == exclude_pid:
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced or damaged: the next scrape reads it
        if record.get("format") == SAMPLE_FORMAT and now - float(record.get("written_at", 0)) <= max_age_s:
            out.append(record["sample"])
    return out


def node_sample(directory: Path | None = None) -> tuple[Sample, int]:
    """This process's caches merged with the spooled ones; also how many processes took part."""
    directory = spool_dir() if directory is None else directory
    others = read_node_samples(directory, exclude_pid=os.getpid())
    own = process_samples()
    return merge_samples([*own, *others]), len(others) + (1 if own else 0)


class NodeCollector(Collector):
    """Prometheus collector for the whole node (this process plus spooled samples)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory

    def collect(self) -> Iterator[object]:  # type: ignore[override]
        yield from families(node_sample(self.directory)[0])


class SamplePublisher:
    """Spools this process's sample every ``interval_s`` until ``stop()``; never raises."""

    def __init__(self, directory: Path | None = None, interval_s: float = 1.0) -> None:
        self.directory = spool_dir() if directory is None else directory
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lifeboat-metrics-spool", daemon=True)
        self._warned = False

    def start(self) -> SamplePublisher:
        self._thread.start()
        return self

    def publish_once(self) -> None:
        try:
            write_sample(self.directory, merge_samples(process_samples()))
        except OSError as exc:
            if not self._warned:
                log.warning("metrics spool %s not writable (%s): this process is missing from the node's "
                            "metrics; set %s to a writable directory", self.directory, exc, ENV_SPOOL)
                self._warned = True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.publish_once()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        (self.directory / f"{os.getpid()}.json").unlink(missing_ok=True)
