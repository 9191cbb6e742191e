"""``LIFEBOAT_CACHE=1``: fill vLLM's ``kv_transfer_config`` with our spec and tier.

Registered as a ``vllm.general_plugins`` entry point, so vLLM calls :func:`load` once per
process (API server, EngineCore, workers). Without the variable it does nothing. vLLM has
no hook that hands a plugin the config, so :func:`load` wraps
``EngineArgs.create_engine_config`` (monkeypatching, idempotent): that runs in process 0 for
both ``vllm serve`` and ``LLM(...)``, before the ``VllmConfig`` is built and shipped to
EngineCore and the workers. An explicit ``--kv-transfer-config`` always wins.
"""

from __future__ import annotations

import logging
from typing import Any

from lifeboatcache_core.patching import run_before

from lifeboatcache_vllm.settings import (
    ADAPTER,
    EXTRA_KEY,
    cpu_bytes,
    enabled_by_env,
    ensure_log_handler,
    on_error_of,
    resolve_config,
    vllm_settings,
)

log = logging.getLogger("lifeboatcache.vllm")

SPEC_NAME = "LifeboatOffloadingSpec"
SPEC_MODULE = "lifeboatcache_vllm.spec"
TIER_TYPE = "LifeboatTier"
TIER_MODULE = "lifeboatcache_vllm.tier"
_MARK = "_lifeboatcache_wrapped"


def extra_config(source: Any = None) -> dict[str, Any]:
    """``kv_connector_extra_config`` for vLLM's OffloadingConnector with lifeboatcache below its CPU tier.

    ``source`` is what :func:`~lifeboatcache_vllm.settings.resolve_config` takes (None: env or
    defaults). Raises ``ConfigError`` for a bad config. The config travels inline (as JSON),
    so EngineCore on another host or after a fork sees exactly what was validated here.
    """
    config = resolve_config(source)
    return {
        "spec_name": SPEC_NAME,
        "spec_module_path": SPEC_MODULE,
        "cpu_bytes_to_use": cpu_bytes(vllm_settings(config)),
        # multi-turn reuse needs the assistant's tokens too (vLLM's default skips them)
        "offload_prompt_only": False,
        EXTRA_KEY: config.model_dump(mode="json", exclude_none=True),
        "secondary_tiers": [{"type": TIER_TYPE, "module_path": TIER_MODULE}],
    }


def kv_transfer_config_dict(source: Any = None) -> dict[str, Any]:
    """The whole ``--kv-transfer-config`` JSON (for command lines and ``LLM(kv_transfer_config=...)``)."""
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra_config(source),
    }


def apply(engine_args: Any) -> bool:
    """Fill ``engine_args.kv_transfer_config`` unless the user set one; return whether we did."""
    if engine_args.kv_transfer_config is not None:
        log.warning("lifeboatcache: LIFEBOAT_CACHE=1 but an explicit --kv-transfer-config is set; "
                    "using it unchanged (lifeboatcache stays out)")
        return False
    try:
        settings = kv_transfer_config_dict()
    except Exception as exc:
        if on_error_of(None) == "fail":
            raise RuntimeError(f"lifeboatcache: bad configuration: {exc}; refusing to start because "
                               "engine.on_error = 'fail'") from exc
        log.error("lifeboatcache: bad configuration, vLLM serves without it: %s", exc)
        return False
    lifeboat = settings["kv_connector_extra_config"][EXTRA_KEY]
    mode = lifeboat.get("engine", {}).get(ADAPTER, {}).get("vllm_mode", "native")  # checked by extra_config
    if mode != "native":
        log.info("lifeboatcache: engine.vllm.vllm_mode = %r; the native tier stays out (the LMCache adapter "
                 "serves)", mode)
        return False
    from vllm.config import KVTransferConfig

    engine_args.kv_transfer_config = KVTransferConfig(**settings)
    log.info("lifeboatcache: enabled below vLLM's CPU tier (tiers: %s)",
             ", ".join(f"{t.get('name') or t['backend']}={t['backend']}" for t in lifeboat["tiers"]))
    return True


def load() -> None:
    """vLLM general-plugin entry point."""
    if not enabled_by_env():
        return
    ensure_log_handler()
    from vllm.engine.arg_utils import EngineArgs

    run_before(EngineArgs, "create_engine_config", apply, _MARK)
