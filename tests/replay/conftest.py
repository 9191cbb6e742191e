"""Fixtures: a fake OpenAI-compatible server process per test, stopped by PID."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKE_SERVER = Path(__file__).with_name("fake_openai.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class FakeServer:
    url: str
    log: Path

    def requests(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[Callable[..., FakeServer]]:
    processes: list[subprocess.Popen] = []

    def start(*extra: str) -> FakeServer:
        port = free_port()
        log = tmp_path / f"requests-{port}.jsonl"
        process = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", str(port), "--log", str(log), *extra])
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=1):
                    return FakeServer(url, log)
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake server on port {port} did not start (exit {process.poll()})") from None
                time.sleep(0.05)

    yield start
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
