"""Settings of the LMCache adapter: the L2 ``adapter_params`` and the local server (import-light).

``adapter_params`` of ``--l2-adapter '{"type": "plugin", ...}'`` are validated by
:class:`L2AdapterParams`, which rejects unknown keys and lists the valid ones, so a typo is
an error at server start instead of a silently ignored setting.
"""

from __future__ import annotations

import json
import os
from typing import Any

from lifeboatcache_core.config import (
    LifeboatConfig,
    OnError,
    config_from_env,
    engine_on_error,
    format_validation_error,
)
from lifeboatcache_core.errors import ConfigError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

ADAPTER_MODULE = "lifeboatcache_lmcache.l2_adapter"
ADAPTER_CLASS = "LifeboatL2Adapter"
ENV_ENABLE = "LIFEBOAT_CACHE"


class L2AdapterParams(BaseModel):
    """``adapter_params`` of the plugin L2 adapter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lifeboat_config: str | None = None
    """A lifeboatcache TOML/YAML config; default ``$LIFEBOAT_CACHE_CONFIG``, else the built-in tiers."""
    model_path: str | None = None
    """Checkpoint to fingerprint (LMCache keys name the model, not its weights)."""
    on_error: OnError | None = None
    """Overrides ``engine.on_error`` of the lifeboatcache config."""
    io_waiters: int = Field(default=8, ge=1, le=256)
    """Threads that wait for finished cache jobs and signal LMCache's event fds."""

    @classmethod
    def parse(cls, params: dict[str, Any] | None) -> L2AdapterParams:
        try:
            return cls.model_validate(params or {})
        except ValidationError as exc:
            raise ConfigError(f"lifeboatcache L2 adapter_params: {format_validation_error(exc, cls)}") from None


def l2_adapter_json(**params: Any) -> str:
    """The ``--l2-adapter`` value that puts lifeboatcache under an LMCache MP server."""
    checked = L2AdapterParams(**params).model_dump(exclude_none=True, exclude_defaults=True)
    return json.dumps({"type": "plugin", "module_path": ADAPTER_MODULE, "class_name": ADAPTER_CLASS,
                       "adapter_params": checked})


def load_lifeboat_config(path: str | None) -> LifeboatConfig:
    """The config file ``path``, else ``$LIFEBOAT_CACHE_CONFIG``, else the defaults."""
    return config_from_env(path)


def on_error_of(params: dict[str, Any] | None) -> OnError:
    """``engine.on_error`` for settings that may themselves be broken (then: best effort)."""
    params = params or {}
    return engine_on_error(lambda: load_lifeboat_config(params.get("lifeboat_config")), params.get("on_error"))


def enabled_by_env() -> bool:
    return os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes", "on")
