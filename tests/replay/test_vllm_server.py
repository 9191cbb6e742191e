"""The one vLLM server process class: what a server that dies leaves behind is stopped with it.

vLLM's EngineCore runs on after its API server is killed or crashes (vLLM 0.32; see
``tests/adapters/vllm/test_shm_cleanup.py``): a grid cell whose server died must not leave an
engine computing beside the next cell. Here a stand-in server starts a child in its process
group and exits, as an API server that crashed while starting does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lifeboatcache.grid.server import ServerFailed, ServerSpec, VllmServer
from tests.process_groups import group_members, wait_group_gone

#: a server that leaves a child (its "engine") in its process group and fails
LEAVES_A_CHILD = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                  "sys.exit(3)")


def test_a_server_that_died_takes_what_is_left_of_its_process_group_with_it(tmp_path: Path) -> None:
    program = (sys.executable, "-c", LEAVES_A_CHILD)
    server = VllmServer.for_spec(ServerSpec("m", "m", program=program), tmp_path / "server.log")
    with pytest.raises(ServerFailed, match="exited with status 3 while starting"):
        server.start()
    assert server.process is not None
    group = server.process.pid
    assert wait_group_gone(group, 10.0, poll_s=0.05), f"the dead server's group runs on: {group_members(group)}"
    server.stop()  # again, as a `with` block's exit does after a stop: the empty group is no error
