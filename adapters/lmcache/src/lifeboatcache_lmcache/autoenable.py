"""``LIFEBOAT_CACHE=1`` with ``engine.vllm.vllm_mode = "lmcache"``: vLLM on LMCache, lifeboatcache below.

Registered as a ``vllm.general_plugins`` entry point (vLLM calls :func:`load` in every
process). It does nothing without the variable or in ``native`` mode (the vLLM adapter
handles that one). In ``lmcache`` mode it wraps ``EngineArgs.create_engine_config`` (process
0, before the config is shipped to EngineCore): it checks that LMCache can move KV on this
device (and refuses to start otherwise), starts a local ``lmcache server`` with our L2
adapter, and points ``LMCacheMPConnector`` at it. An explicit ``--kv-transfer-config`` wins.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from lifeboatcache_core.config import ENV_CONFIG
from lifeboatcache_core.patching import run_before

from lifeboatcache_lmcache.settings import enabled_by_env, load_lifeboat_config

log = logging.getLogger("lifeboatcache.lmcache")
_MARK = "_lifeboatcache_lmcache_wrapped"


def lmcache_mode_selected() -> bool:
    """True when ``$LIFEBOAT_CACHE`` is on and the config says ``[engine.vllm] vllm_mode = "lmcache"``.

    The vLLM adapter owns that table (and checks it); this package reads the one key as written,
    so it does not depend on the vLLM adapter's package.
    """
    if not enabled_by_env():
        return False
    try:
        return load_lifeboat_config(None).engine.adapter_table("vllm").get("vllm_mode") == "lmcache"
    except Exception:
        return False  # the vLLM adapter reports a broken config


def set_by_native_mode(kv_transfer_config: Any) -> bool:
    """Whether a ``kv_transfer_config`` is the one lifeboatcache's vLLM adapter fills in native mode.

    Both plugins wrap the same vLLM method and vLLM runs plugins in no fixed order, so in
    LMCache mode that one is replaced, while a user's own config is always kept.
    """
    extra = getattr(kv_transfer_config, "kv_connector_extra_config", None)
    if extra is None and isinstance(kv_transfer_config, dict):
        extra = kv_transfer_config.get("kv_connector_extra_config")
    return isinstance(extra, dict) and str(extra.get("spec_module_path", "")).startswith("lifeboatcache_vllm.")


def apply(engine_args: Any) -> bool:
    """Fill ``engine_args.kv_transfer_config`` with LMCache's MP connector; return whether we did."""
    from lifeboatcache_lmcache.server import (
        LocalServer,
        check_device,
        free_port,
        kv_transfer_config_dict,
        server_command,
    )

    if engine_args.kv_transfer_config is not None and not set_by_native_mode(engine_args.kv_transfer_config):
        log.warning("lifeboatcache: LIFEBOAT_CACHE=1 but an explicit --kv-transfer-config is set; using it "
                    "unchanged (lifeboatcache stays out)")
        return False
    kind = check_device()  # raises: never run "LMCache mode" that cannot move KV
    config = load_lifeboat_config(None)
    port = free_port()
    server = LocalServer(server_command(config, port=port, config_path=os.environ.get(ENV_CONFIG),
                                       model_path=getattr(engine_args, "model", None)), port).start()
    from vllm.config import KVTransferConfig

    engine_args.kv_transfer_config = KVTransferConfig(**kv_transfer_config_dict(server.host, port))
    log.info("lifeboatcache: LMCache mode on %s: LMCache server pid %s on port %d, lifeboatcache as its L2",
             kind, server.process.pid if server.process else "?", port)
    return True


def load() -> None:
    """vLLM general-plugin entry point."""
    if not lmcache_mode_selected():
        return
    from vllm.engine.arg_utils import EngineArgs

    run_before(EngineArgs, "create_engine_config", apply, _MARK)
