"""The CPU tier's /dev/shm file without an engine: liveness lock, mark, unlink and sweep."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from lifeboatcache_vllm.region import WorkerRegion, drop_name, region_path, sweep_dead_regions

PAGE = os.sysconf("SC_PAGE_SIZE")


def _region(engine_id: str) -> WorkerRegion:
    return WorkerRegion(engine_id=engine_id, num_chunks=2, rank=0, kv_bytes_per_chunk=PAGE, cpu_page_size=PAGE)


@pytest.fixture
def engine_id() -> Iterator[str]:
    engine = f"lifeboat-test-{uuid.uuid4()}"
    yield engine
    drop_name(region_path(engine))


def test_creator_marks_the_file_and_tolerates_a_dropped_name(engine_id: str) -> None:
    region = _region(engine_id)
    path = region_path(engine_id)
    assert os.stat(path).st_mode & stat.S_ISVTX
    region.base_tensor[:4] = 7
    drop_name(path)  # what the scheduler side does once it has mapped the file
    assert int(region.base_tensor[3]) == 7  # the mapping outlives the name
    region.cleanup()  # no second unlink to fail
    assert not os.path.exists(path)


def test_cleanup_unlinks_a_name_never_dropped(engine_id: str) -> None:
    _region(engine_id).cleanup()
    assert not os.path.exists(region_path(engine_id))


def test_sweep_keeps_live_and_unmarked_files_and_removes_dead_ones(engine_id: str) -> None:
    live = _region(engine_id)
    unmarked = region_path(f"{engine_id}-stock")
    with open(unmarked, "wb"):
        pass
    dead = f"{engine_id}-dead"
    # a worker SIGKILLed before its name was dropped: the mark stays, the lock goes with the process
    code = ("import os, signal; from lifeboatcache_vllm.region import WorkerRegion; "
            f"WorkerRegion(engine_id={dead!r}, num_chunks=1, rank=0, kv_bytes_per_chunk={PAGE}, "
            f"cpu_page_size={PAGE}); os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == -9
    try:
        assert os.path.exists(region_path(dead))
        sweep_dead_regions(0)
        assert not os.path.exists(region_path(dead))
        assert os.path.exists(region_path(engine_id))
        assert os.path.exists(unmarked)
    finally:
        live.cleanup()
        drop_name(unmarked)
        drop_name(region_path(dead))
