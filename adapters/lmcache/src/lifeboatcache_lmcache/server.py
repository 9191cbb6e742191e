"""LMCache mode for vLLM: a local LMCache MP server with lifeboatcache as its L2, and the
``kv_transfer_config`` that points vLLM's ``LMCacheMPConnector`` at it.

LMCache moves KV between the engine's device memory and its L1 with its own kernels; it has
them for CUDA (and ROCm/XPU builds) but not for a CPU-only engine (its in-process connector
says ``No supported cpu connector found``). Running vLLM with a connector that cannot move
KV would serve uncached while looking cached, so :func:`check_device` refuses instead.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from lifeboatcache_core.config import LifeboatConfig

from lifeboatcache_lmcache.settings import l2_adapter_json

log = logging.getLogger("lifeboatcache.lmcache")

DEFAULT_HOST = "localhost"
DEFAULT_L1_GB = 4.0
START_TIMEOUT_S = 120.0


class LMCacheModeUnavailable(RuntimeError):
    """LMCache mode cannot work here; the message says why and what to use instead."""


def device_kind() -> str:
    """The accelerator vLLM will run on: ``cuda``, ``rocm``, ``xpu`` or ``cpu``."""
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return "cpu"


def check_device(kind: str | None = None) -> str:
    """Raise :class:`LMCacheModeUnavailable` unless LMCache has KV transfer kernels for ``kind``."""
    kind = kind or device_kind()
    if kind == "cpu":
        raise LMCacheModeUnavailable(
            "engine.vllm.vllm_mode = 'lmcache' needs LMCache's GPU KV-transfer kernels, and this engine runs on "
            "the CPU (no CUDA/ROCm/XPU device): LMCache has no CPU connector, so vLLM would serve uncached. "
            "Use engine.vllm.vllm_mode = 'native' (lifeboatcache's own CPU-capable tier) on this machine"
        )
    try:
        import lmcache  # noqa: F401
    except ImportError as exc:
        raise LMCacheModeUnavailable(
            f"engine.vllm.vllm_mode = 'lmcache' needs LMCache in vLLM's environment ({exc}); install it with: "
            "pip install 'lifeboatcache[lmcache]' 'lmcache>=0.5.6'"
        ) from exc
    return kind


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_command(config: LifeboatConfig | None = None, *, port: int, host: str = DEFAULT_HOST,
                   l1_size_gb: float | None = None, config_path: str | None = None,
                   model_path: str | None = None) -> list[str]:
    """``lmcache server`` with lifeboatcache as its only L2 adapter."""
    # vLLM's CPU tier size (the vLLM adapter's ``native_cpu_gb``) is LMCache's L1 in this mode
    l1 = l1_size_gb or (config or LifeboatConfig()).engine.adapter_table("vllm").get("native_cpu_gb") or DEFAULT_L1_GB
    params: dict[str, Any] = {}
    if config_path:
        params["lifeboat_config"] = config_path
    if model_path:
        params["model_path"] = model_path
    exe = shutil.which("lmcache") or os.path.join(os.path.dirname(sys.executable), "lmcache")
    return [exe, "server", "--host", host, "--port", str(port), "--l1-size-gb", f"{l1:g}",
            "--l2-adapter", l2_adapter_json(**params)]


def kv_transfer_config_dict(host: str, port: int) -> dict[str, Any]:
    """vLLM's ``--kv-transfer-config`` for LMCache's MP connector talking to ``host:port``."""
    return {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": f"tcp://{host}", "lmcache.mp.port": port},
    }


@dataclass
class LocalServer:
    """A local ``lmcache server`` this process started, stopped by PID at exit."""

    command: list[str]
    port: int
    host: str = DEFAULT_HOST
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, timeout: float = START_TIMEOUT_S) -> LocalServer:
        log.info("lifeboatcache: starting LMCache server: %s", " ".join(self.command[:8]))
        self.process = subprocess.Popen(self.command, start_new_session=True)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LMCacheModeUnavailable(
                    f"the LMCache server exited with status {self.process.returncode} at start; "
                    f"run `{' '.join(self.command)}` to see why"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise LMCacheModeUnavailable(f"the LMCache server did not listen on {self.host}:{self.port} "
                                     f"within {timeout:.0f}s")

    def stop(self) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
