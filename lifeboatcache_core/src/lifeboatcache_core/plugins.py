"""The plugin manager: built-ins first, then entry points of group ``lifeboatcache``.

Loading is lazy (first call of :func:`get_registry`), happens once, and never lets one
broken plugin stop the others: a failure is recorded and raised, chained, only when a
config selects a name of that plugin. Tests call :func:`reset_registry` and may register
throwaway plugin objects with :func:`register_plugin`.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from importlib.metadata import entry_points

import pluggy

from lifeboatcache_core import hookspecs
from lifeboatcache_core.registry import PluginRegistry, PluginStatus, Registrar
from lifeboatcache_core.version import __version__

log = logging.getLogger("lifeboatcache.plugins")

GROUP = "lifeboatcache"
CORE_DIST = "lifeboatcache-core"
BUILTINS: dict[str, str] = {
    "dram": "lifeboatcache_core.builtin._plugin_dram",
    "lru": "lifeboatcache_core.builtin._plugin_lru",
    "none": "lifeboatcache_core.builtin._plugin_none",
    "sqlite": "lifeboatcache_core.builtin._plugin_sqlite",
}
#: entry points the core's own defaults select (the default config's ``nvme`` tier and the local
#: fallback are ``file`` tiers, from ``lifeboatcache-backend-file``): kept like the built-ins when
#: ``LIFEBOATCACHE_LOAD_PLUGINS`` selects a subset, so that subset never breaks the defaults
DEFAULT_PLUGINS = frozenset({"file"})
HOOKS = (
    "lifeboatcache_add_backends",
    "lifeboatcache_add_manifests",
    "lifeboatcache_add_codecs",
    "lifeboatcache_add_policies",
    "lifeboatcache_add_adapters",
)

_lock = threading.Lock()
_registry: PluginRegistry | None = None
_manager: pluggy.PluginManager | None = None


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _register_one(registry: PluginRegistry, pm: pluggy.PluginManager, name: str,
                  plugin: object, dist: str, version: str) -> None:
    """Register ``plugin`` and run its registrar hooks, isolated from the others."""
    pm.register(plugin, name=name)
    pm.check_pending()  # a misspelt hook name is an error, not a silent no-op
    registrar = Registrar(registry, name, dist, version)
    others = [p for p in pm.get_plugins() if p is not plugin]
    for hook in HOOKS:
        pm.subset_hook_caller(hook, remove_plugins=others)(register=registrar)


def _try_register(registry: PluginRegistry, pm: pluggy.PluginManager, name: str,
                  load: Callable[[], object], dist: str, version: str) -> None:
    try:
        plugin = load()
        _register_one(registry, pm, name, plugin, dist, version)
        registry.plugins[name] = PluginStatus(name, dist, version, "ok")
    except Exception as exc:  # one broken plugin must not stop the rest
        log.warning("plugin %r (%s) failed to load: %s", name, dist, exc)
        if pm.has_plugin(name):
            pm.unregister(name=name)
        registry.plugins[name] = PluginStatus(name, dist, version, f"FAILED: {exc}", exc)


def _build() -> tuple[PluginRegistry, pluggy.PluginManager]:
    registry = PluginRegistry()
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    disabled = _env_names("LIFEBOATCACHE_DISABLE_PLUGINS") or set()
    only = _env_names("LIFEBOATCACHE_LOAD_PLUGINS")

    def active(name: str) -> bool:
        return name not in disabled and (only is None or name in only or name in BUILTINS or name in DEFAULT_PLUGINS)

    for name, module in BUILTINS.items():
        if name in disabled:
            registry.plugins[name] = PluginStatus(name, CORE_DIST, __version__, "inactive")
            continue
        _try_register(registry, pm, name, lambda m=module: importlib.import_module(m), CORE_DIST, __version__)

    seen: set[str] = set()
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist else "?"
        version = ep.dist.version if ep.dist else "?"
        if ep.name in seen or ep.name in BUILTINS:
            registry.plugins.setdefault(ep.name, PluginStatus(ep.name, dist, version, "ok"))
            continue
        seen.add(ep.name)
        if not active(ep.name):
            registry.plugins[ep.name] = PluginStatus(ep.name, dist, version, "inactive")
            continue
        _try_register(registry, pm, ep.name, ep.load, dist, version)
    return registry, pm


def get_registry() -> PluginRegistry:
    """The process-wide registry, built on first use."""
    global _registry, _manager
    with _lock:
        if _registry is None:
            _registry, _manager = _build()
        return _registry


def reset_registry() -> None:
    """Forget every loaded plugin (tests; after changing the env variables)."""
    global _registry, _manager
    with _lock:
        _registry, _manager = None, None


def register_plugin(plugin: object, name: str, distribution: str = "test", version: str = "0") -> None:
    """Register an in-process plugin object (tests, embedding applications)."""
    registry = get_registry()
    assert _manager is not None
    _try_register(registry, _manager, name, lambda: plugin, distribution, version)


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with :func:`register_plugin` and everything it added."""
    registry = get_registry()
    assert _manager is not None
    if _manager.has_plugin(name):
        _manager.unregister(name=name)
    registry.plugins.pop(name, None)
    for kind, entries in registry.entries.items():
        for key in [k for k, reg in entries.items() if reg.plugin == name]:
            del entries[key]
            registry._loaded.pop((kind, key), None)
