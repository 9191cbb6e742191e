"""``start_dashboard(cache)`` for engine adapters, without importing the application.

Adapters are plugins and must not import the ``lifeboatcache`` app (DESIGN §2), yet the node
dashboard lives there. The app registers its starter under the entry-point group
``lifeboatcache.dashboard``; this shim finds it. Nothing here ever raises into the engine:
disabled, not installed or failing to start are one log line and ``None``.

Disable with ``dashboard.enabled = false`` in the config or ``LIFEBOAT_DASHBOARD=0``.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lifeboatcache_core.cache import TieredCache

log = logging.getLogger("lifeboatcache")

ENV_DASHBOARD = "LIFEBOAT_DASHBOARD"
GROUP = "lifeboatcache.dashboard"


def dashboard_disabled(cache: TieredCache) -> bool:
    env = os.environ.get(ENV_DASHBOARD, "").strip().lower()
    return env in ("0", "false", "no", "off") or not cache.config.dashboard.enabled


def start_dashboard(cache: TieredCache, host: str | None = None, port: int | None = None) -> Any | None:
    """Start the dashboard for ``cache`` in a background thread; return its handle or None."""
    if dashboard_disabled(cache):
        return None
    found = list(entry_points(group=GROUP))
    if not found:
        log.info("dashboard not started: install it with `pip install 'lifeboatcache[dashboard]'`")
        return None
    try:
        return found[0].load()(cache, host=host, port=port)
    except Exception as exc:  # never into the engine
        log.warning("dashboard not started: %s: %s", type(exc).__name__, exc)
        return None
