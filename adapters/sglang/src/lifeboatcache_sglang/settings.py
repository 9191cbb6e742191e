"""The ``--hicache-storage-backend-extra-config`` keys this backend reads, and opening its cache.

SGLang hands every extra-config key it does not consume itself to the backend, so the
model below lists SGLang's keys too and rejects anything else: a typo such as
``lifeboat_confg`` is an error naming the valid keys, never a silently ignored setting.
"""

from __future__ import annotations

import json
from typing import Any

from lifeboatcache_core.config import (
    LifeboatConfig,
    OnError,
    config_from_env,
    engine_on_error,
    format_validation_error,
)
from lifeboatcache_core.errors import ConfigError
from pydantic import BaseModel, ConfigDict, ValidationError

BACKEND_NAME = "lifeboatcache"
STORAGE_MODULE = "lifeboatcache_sglang.storage"
STORAGE_CLASS = "LifeboatHiCacheStorage"


class SGLangStorageSettings(BaseModel):
    """The extra config of ``--hicache-storage-backend dynamic`` as this backend sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # read by SGLang's dynamic loader and controller
    backend_name: str = BACKEND_NAME
    module_path: str = STORAGE_MODULE
    class_name: str = STORAGE_CLASS
    interface_v1: bool = True
    # consumed by SGLang 0.5.23 before the backend sees them; older versions pass them on
    prefetch_threshold: int | None = None
    prefetch_timeout_base: float | None = None
    prefetch_timeout_per_ki_token: float | None = None
    hicache_storage_pass_prefix_keys: bool | None = None
    tp_lcm_size: int | None = None
    # added by SGLang when --file-storage-path is given (for its file backend; unused here)
    file_storage_path: str | None = None
    # ours
    lifeboat_config: str | None = None
    """A lifeboatcache TOML/YAML config; default ``$LIFEBOAT_CACHE_CONFIG``, else the built-in tiers."""
    lifeboat_model_path: str | None = None
    """The checkpoint to fingerprint; default SGLang's model name when it is a local path."""
    lifeboat_on_error: OnError | None = None
    """Overrides ``engine.on_error`` of the lifeboatcache config."""

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> SGLangStorageSettings:
        try:
            return cls.model_validate(extra or {})
        except ValidationError as exc:
            raise ConfigError(
                f"--hicache-storage-backend-extra-config: {format_validation_error(exc, cls)}"
            ) from None


def dynamic_extra_config(**ours: Any) -> dict[str, Any]:
    """The extra config that loads this backend (``ours``: the ``lifeboat_*`` keys)."""
    settings = SGLangStorageSettings(**ours)
    return settings.model_dump(exclude_none=True)


def launch_flags(**ours: Any) -> list[str]:
    """The SGLang command-line flags that turn this backend on (zero-copy interface)."""
    return [
        "--enable-hierarchical-cache",
        "--hicache-storage-backend", "dynamic",
        "--hicache-storage-backend-extra-config", json.dumps(dynamic_extra_config(**ours)),
    ]


def load_lifeboat_config(settings: SGLangStorageSettings) -> LifeboatConfig:
    """The lifeboatcache config named by the settings, ``$LIFEBOAT_CACHE_CONFIG``, or the defaults."""
    return config_from_env(settings.lifeboat_config)


def on_error_of(extra: dict[str, Any] | None) -> OnError:
    """``engine.on_error`` for a configuration that may itself be broken (then: best effort)."""
    extra = extra or {}
    return engine_on_error(lambda: config_from_env(extra.get("lifeboat_config")), extra.get("lifeboat_on_error"))
