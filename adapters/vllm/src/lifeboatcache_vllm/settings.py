"""Where the vLLM adapter gets its lifeboatcache configuration, and its vLLM-specific defaults.

Import-light (no vLLM): used by the auto-enable plugin in every vLLM process, by the tier in
EngineCore and by the launch helpers.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from lifeboatcache_core.config import (
    ENV_CONFIG,
    EngineConfig,
    LifeboatConfig,
    TierConfig,
    default_cache_dir,
    load_config,
    load_config_dict,
    parse_text,
)
from lifeboatcache_core.errors import ConfigError

#: set to 1 to let the ``vllm.general_plugins`` entry point enable lifeboatcache
ENV_ENABLE = "LIFEBOAT_CACHE"
#: the key of ``kv_connector_extra_config`` holding the lifeboatcache config mapping
EXTRA_KEY = "lifeboatcache"
GIB = 1024**3
MAX_DEFAULT_CPU_BYTES = 16 * GIB


def ensure_log_handler() -> None:
    """Make our INFO lines visible inside vLLM processes.

    vLLM configures only its own ``vllm`` logger; without a handler our one-line reasons
    (tier disabled, explicit config wins) would be dropped. Nothing is added when the
    application (or pytest) already configured logging.
    """
    ours = logging.getLogger("lifeboatcache")
    if ours.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [lifeboatcache] %(message)s", "%m-%d %H:%M:%S"))
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)


def enabled_by_env() -> bool:
    return os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes", "on")


#: the codec of the default file tier: exact KV in fewer bytes. Below vLLM's CPU tier a disk
#: that fills decides how much of a session comes back, and the lossless codec makes the same
#: disk hold 1.47x as much bf16 KV (1.28x for dtypes it sees as bytes).
DEFAULT_TIER_CODEC = "lossless"
#: ... once the disk is 80 % full (``codec_from_fill``): below that blocks are stored raw and
#: load as fast as without a codec, from there they are coded and the raw ones re-encoded in
#: place, so a disk that fills holds what an always-coding tier holds. Coding every block cost
#: a returning 7.4k-token session 36-44 % of its TTFT on a 2-core box where the disk never
#: filled (bench/results, returning-codecs-2026-12-04); from half full without compaction the
#: raw session heads stayed for good (78.0 vs 80.2 % from cache, grid-2026-12-01-r2).
DEFAULT_CODEC_FROM_FILL = 0.8


def default_tier_codec() -> dict[str, Any]:
    """The codec keys of the default file tier (``TierConfig`` fields), for every place that builds one."""
    return {"codec": DEFAULT_TIER_CODEC, "codec_from_fill": DEFAULT_CODEC_FROM_FILL}


def default_vllm_config() -> LifeboatConfig:
    """No config given: one file tier under the user cache dir, lossless once it is 80 % full.

    vLLM's own CPU tier already is the DRAM tier, so the core's default DRAM tier is left out.
    """
    tier = TierConfig(name="nvme", backend="file", capacity_gb=50, path=str(default_cache_dir() / "vllm"),
                      **default_tier_codec())
    return LifeboatConfig(tiers=[tier])


def resolve_config(source: dict[str, Any] | str | os.PathLike[str] | LifeboatConfig | None) -> LifeboatConfig:
    """A mapping, a TOML/YAML path, a config, or None (``$LIFEBOAT_CACHE_CONFIG``, else defaults)."""
    if isinstance(source, LifeboatConfig):
        return source
    if isinstance(source, dict):
        return load_config_dict(source)
    if isinstance(source, (str, Path)):
        return load_config(source)
    if source is None:
        path = os.environ.get(ENV_CONFIG)
        return load_config(path) if path else default_vllm_config()
    raise ConfigError(
        f"kv_connector_extra_config[{EXTRA_KEY!r}] must be a mapping or a config file path, "
        f"got {type(source).__name__}; fix the value or remove it to use $LIFEBOAT_CACHE_CONFIG"
    )


def on_error_of(source: Any) -> str:
    """``engine.on_error`` read leniently, so that a broken config still says how to fail."""
    try:
        return resolve_config(source).engine.on_error
    except Exception:
        if source is None:
            source = os.environ.get(ENV_CONFIG)
        if isinstance(source, (str, Path)):
            try:
                fmt: Literal["toml", "yaml"] = "yaml" if Path(source).suffix in (".yaml", ".yml") else "toml"
                source = parse_text(Path(source).read_text(), fmt)
            except (OSError, ConfigError):
                source = None
        engine = source.get("engine") if isinstance(source, dict) else None
        value = engine.get("on_error") if isinstance(engine, dict) else None
        return value if value in ("serve", "fail") else EngineConfig().on_error


def default_cpu_bytes() -> int:
    """vLLM's CPU tier when ``engine.native_cpu_gb`` is unset: a quarter of RAM, at most 16 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 4 * GIB
    return int(min(total // 4, MAX_DEFAULT_CPU_BYTES))


def cpu_bytes(engine: EngineConfig) -> int:
    return int(engine.native_cpu_gb * GIB) if engine.native_cpu_gb else default_cpu_bytes()
