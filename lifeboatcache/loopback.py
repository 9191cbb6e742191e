"""Real servers on loopback for tests and benchmarks: moto's S3 endpoint and a fault-injecting proxy.

``MotoServer`` runs ``moto_server`` (a real HTTP S3 endpoint) in a child process stopped by PID.
``FaultProxy`` is a TCP proxy that injects the faults a real S3/HTTP endpoint shows, one request
per connection (``Connection: close`` both ways), so each request meets the fault mode in force
when it arrives. Modes: ``pass``; ``http500`` and ``throttle`` (canned S3 error responses);
``forbidden`` (S3's answer to an unknown access key); ``slow`` (hold the request ``delay``
seconds, then forward); ``reset`` (TCP RST before any answer); ``truncate`` (forward the
answer's headers and half its body, then RST). ``shape(latency_s, rate_bytes_s)`` makes every
request look like a remote store's: a fixed latency plus its bytes (both ways) at a bandwidth.

The tests' servers (``tests/backends``) and ``lifeboatcache bench staging`` share this module.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class MotoServer:
    """``moto_server`` (moto's real HTTP S3 endpoint) in a child process."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.log = open(log_dir / f"moto-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
        wait_for_port(self.port, self.proc)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


_ERRORS = {
    "http500": (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
    "throttle": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "forbidden": (403, "Forbidden", "InvalidAccessKeyId",
                  "The AWS Access Key Id you provided does not exist in our records."),
}


@dataclass
class FaultProxy:
    upstream_port: int
    port: int = 0
    mode: str = "pass"
    delay: float = 0.0
    #: when > 0, the mode applies to this many requests only, then the proxy passes again
    budget: int = 0
    #: every request waits ``latency_s`` plus its request and response bytes at ``rate_bytes_s`` (0: no limit)
    latency_s: float = 0.0
    rate_bytes_s: float = 0.0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> FaultProxy:
        self._server = socket.create_server(("127.0.0.1", self.port), backlog=512)  # bursts of parallel requests
        self.port = self._server.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        self._server.close()
        self._thread.join(5)

    def set(self, mode: str, *, budget: int = 0, delay: float = 0.0) -> None:
        with self._lock:
            self.mode, self.budget, self.delay = mode, budget, delay

    def shape(self, latency_s: float, rate_bytes_s: float = 0.0) -> None:
        """Make every request cost ``latency_s`` plus its bytes at ``rate_bytes_s`` (a remote store's shape)."""
        with self._lock:
            self.latency_s, self.rate_bytes_s = latency_s, rate_bytes_s

    def _shaped(self, nbytes: int) -> float:
        with self._lock:
            latency, rate = self.latency_s, self.rate_bytes_s
        return latency + (nbytes / rate if rate > 0 else 0.0)

    def _next_mode(self) -> tuple[str, float]:
        with self._lock:
            self.requests += 1
            mode = self.mode
            if self.budget:
                self.budget -= 1
                if not self.budget:
                    self.mode = "pass"
            return mode, self.delay

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            request = _read_request(conn)
            if request is None:
                return
            mode, delay = self._next_mode()
            if mode == "reset":
                _reset(conn)
                return
            if mode in _ERRORS:
                conn.sendall(_error_response(*_ERRORS[mode]))
                return
            if mode == "slow":
                self._stopped.wait(delay)
            response = _forward(request, self.upstream_port)
            wait = self._shaped(len(request) + len(response))
            if wait > 0:
                self._stopped.wait(wait)
            if mode == "truncate":
                head, _, body = response.partition(b"\r\n\r\n")
                conn.sendall(head + b"\r\n\r\n" + body[: len(body) // 2])
                _reset(conn)
                return
            conn.sendall(response)
        except OSError:
            pass
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    if any(ln.lower().replace(b" ", b"") == b"expect:100-continue" for ln in lines):
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # as S3 does; the client then sends the body
    lines = [ln for ln in lines if not ln.lower().startswith((b"connection:", b"expect:"))]
    length = next((int(ln.split(b":", 1)[1]) for ln in lines if ln.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return None
        body += chunk
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body


def _forward(request: bytes, port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as up:
        up.sendall(request)
        chunks = []
        while chunk := up.recv(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks)


def _error_response(status: int, phrase: str, code: str, message: str) -> bytes:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>fault-proxy</RequestId></Error>").encode()
    head = (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode()
    return head + body


def _reset(conn: socket.socket) -> None:
    """Close with RST (linger 0), as a crashed server or a middlebox does."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()
