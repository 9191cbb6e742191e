"""Where the vLLM adapter gets its lifeboatcache configuration, and its vLLM-specific defaults.

Import-light (no vLLM): used by the auto-enable plugin in every vLLM process, by the tier in
EngineCore and by the launch helpers.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from lifeboatcache_core.abc import PluginConfig
from lifeboatcache_core.config import (
    ENV_CONFIG,
    EngineConfig,
    LifeboatConfig,
    TierConfig,
    default_cache_dir,
    format_validation_error,
    load_config,
    load_config_dict,
    parse_text,
)
from lifeboatcache_core.errors import ConfigError
from pydantic import Field, ValidationError

#: set to 1 to let the ``vllm.general_plugins`` entry point enable lifeboatcache
ENV_ENABLE = "LIFEBOAT_CACHE"
#: the key of ``kv_connector_extra_config`` holding the lifeboatcache config mapping
EXTRA_KEY = "lifeboatcache"
#: the adapter's registered name: its options are the config's ``[engine.vllm]`` table
ADAPTER = "vllm"
GIB = 1024**3
MAX_DEFAULT_CPU_BYTES = 16 * GIB


class VllmSettings(PluginConfig):
    """``[engine.vllm]``: how vLLM's offloading is set up around our tiers (native mode) or not.

    The adapter's registered config model (``_plugin``), so loading a config checks the table;
    the adapter reads it with :func:`vllm_settings`.
    """

    #: tokens per offloaded chunk (one key of ours); "auto": one engine KV block per chunk
    native_block_tokens: int | Literal["auto"] = "auto"
    #: vLLM's CPU tier (``cpu_bytes_to_use``); None: a quarter of RAM, at most 16 GiB. In
    #: ``lmcache`` mode the LMCache server's L1 size unless its own is given
    native_cpu_gb: float | None = Field(default=None, gt=0)
    #: ``native``: our tier under vLLM's CPU tier; ``lmcache``: vLLM on LMCache, us below it as
    #: its L2 adapter (``lifeboatcache_lmcache.autoenable`` serves that mode)
    vllm_mode: Literal["native", "lmcache"] = "native"
    #: native mode: once the bottom tier is full, a chunk vLLM's CPU tier holds stays only
    #: there and is stored here when that tier is about to drop it (``lifeboatcache_vllm.cpu_shadow``):
    #: full, the two tiers hold different chunks instead of mostly the same ones. Off (vLLM's
    #: write-through), a full tier's ``keep_prefixes`` declines new chunks while every block is a
    #: live session's and keeps the heads it stored first. Measured on a bounded disk (bench/results,
    #: r37 and r38 on other traces): off served 3-8 points more of the prompt from cache than on,
    #: at a 7-10 % lower mean TTFT (1.04-1.08x of vLLM's fs tier, where on was 0.97x), so it is off
    exclusive_when_full: bool = False
    #: native mode: a chunk found only here is answered one scheduler step after it is first
    #: asked for (RETRY, then HIT), as vLLM's own fs tier answers every lookup. The step's
    #: requests that vLLM's CPU tier serves whole are scheduled first, and our promotions into
    #: that tier (each evicts its coldest row) no longer push out the chunks they are about to
    #: load. Measured (bench/results/grid-2026-12-01-r5): unbounded disk TTFT 4.49 s on vs
    #: 5.12 s off (vllm-fs 4.51 s), bounded disk 1.13x vs 1.00x of vllm-fs
    defer_promotions: bool = True
    #: native mode: the share of vLLM's CPU-tier rows that promotions from here may fill for
    #: requests not yet scheduled. vLLM promotes a waiting request's whole prefix as soon as a
    #: lookup of it hits here, for every waiting request it scans in a step; past what its CPU
    #: tier holds, later promotions evict earlier ones before their requests run (loaded again,
    #: or a row it cannot allocate: a miss, and the rest of that prompt is recomputed). A request
    #: whose chunks here would not fit in the budget beside those already promoted for others is
    #: answered RETRY until they are scheduled; one request is always let through. 0: off. 0.5 was
    #: best of 0.25/0.5/0.75/1.0 at 16 agents (bench/results, thirty-first and thirty-second rounds)
    promotion_budget: float = Field(default=0.5, ge=0.0, le=1.0)


def vllm_settings(config: LifeboatConfig) -> VllmSettings:
    """The config's ``[engine.vllm]`` table, checked (the model's defaults where it is absent)."""
    try:
        return VllmSettings.model_validate(config.engine.adapter_table(ADAPTER))
    except ValidationError as exc:
        raise ConfigError(f"engine.{ADAPTER}: {format_validation_error(exc, VllmSettings)}") from None


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
    """vLLM's CPU tier when ``engine.vllm.native_cpu_gb`` is unset: a quarter of RAM, at most 16 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 4 * GIB
    return int(min(total // 4, MAX_DEFAULT_CPU_BYTES))


def cpu_bytes(settings: VllmSettings) -> int:
    return int(settings.native_cpu_gb * GIB) if settings.native_cpu_gb else default_cpu_bytes()
