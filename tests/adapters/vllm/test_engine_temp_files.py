"""Engine processes leave nothing in the temporary folder.

vLLM puts its ZMQ sockets and its executor's file-store rendezvous in the temporary folder and a
stopped server leaves them there (a test suite left 52 sockets and 5 files in /tmp); the offline
runner ends with ``os._exit`` (vLLM's in-process engine may hold non-daemon threads), which skips
any clean-up. Each process tree now gets a temporary folder of its own, removed after it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_vllm.launch import ServeOptions

from lifeboatcache.grid.configs import EngineSettings, server_spec
from lifeboatcache.grid.server import ServerFailed, ServerSpec, VllmServer
from lifeboatcache.models import smollm2_hf_dir
from tests.adapters.vllm.engine import ENGINE, first_turns, run_engine

#: a server program that fails at once, as one that finds no GPU or a bad flag does
EXITS = (sys.executable, "-c", "import sys; sys.exit(3)")


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A new temporary folder for this process and the processes it starts, empty; a short path, as
    the system's is (vLLM's sockets must fit in 107 bytes: tmp_path's folders are too deep; it is
    asked for first so that pytest makes it in the system's temporary folder)."""
    folder = Path(tempfile.mkdtemp(prefix="lbc-test-"))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder)


@pytest.mark.slow
def test_an_offline_engine_run_leaves_nothing_in_the_temporary_folder(temp: Path, tmp_path: Path) -> None:
    plan = {"model": str(smollm2_hf_dir()), **ENGINE, "connector": "none",
            "steps": [{"prompts": first_turns(1), "max_tokens": 1}]}
    result = run_engine(plan, tmp_path / "engine.log", env={"TMPDIR": str(temp)})
    assert len(result["steps"][0]["tokens"][0]) == 1
    assert sorted(p.name for p in temp.iterdir()) == []


@pytest.mark.slow
def test_a_stopped_vllm_serve_leaves_nothing_in_the_temporary_folder(temp: Path, tmp_path: Path) -> None:
    options = ServeOptions(model=str(smollm2_hf_dir()), dtype=str(ENGINE["dtype"]),
                           max_model_len=int(ENGINE["max_model_len"]), block_size=int(ENGINE["block_size"]),
                           kv_cache_bytes=int(ENGINE["kv_cache_bytes"]), lifeboat=False)
    with VllmServer.for_options(options, tmp_path / "serve.log") as server:
        assert server.complete([1, 2, 3], max_tokens=1)["choices"]
    assert sorted(p.name for p in temp.iterdir()) == []


@pytest.mark.slow
def test_a_stopped_grid_server_leaves_nothing_in_the_temporary_folder(temp: Path, tmp_path: Path) -> None:
    settings = EngineSettings(model=str(smollm2_hf_dir()), served_name="smollm2", device="cpu",
                              max_model_len=512, block_size=32, device_kv_blocks=64)
    with VllmServer.for_spec(server_spec("vllm", settings, 0.0, tmp_path), tmp_path / "server.log") as server:
        assert server.exited() is None
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_vllm_serve_that_fails_to_start_leaves_nothing_in_the_temporary_folder(temp: Path, tmp_path: Path) -> None:
    server = VllmServer.for_options(ServeOptions(model="m"), tmp_path / "serve.log")
    server.command = list(EXITS)
    with pytest.raises(ServerFailed, match="exited with status 3"):
        server.start()
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_grid_server_that_fails_to_start_leaves_nothing_in_the_temporary_folder(temp: Path, tmp_path: Path) -> None:
    with pytest.raises(ServerFailed, match="exited with status 3"):
        VllmServer.for_spec(ServerSpec("m", "m", program=EXITS), tmp_path / "server.log").start()
    assert sorted(p.name for p in temp.iterdir()) == []
