"""What plugins registered, and lazy loading of the registered import strings.

Hooks only *register* strings; :meth:`PluginRegistry.load` imports a target when a config
selects it, so one broken optional package breaks only its own names (fsspec's rule).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from lifeboatcache_core.errors import (
    DuplicatePluginError,
    MissingPluginPackageError,
    PluginLoadError,
    UnknownPluginError,
)

Kind = Literal["backend", "manifest", "codec", "policy", "adapter"]
KINDS: tuple[Kind, ...] = ("backend", "manifest", "codec", "policy", "adapter")

#: the application distribution; its extras name the first-party plugin packages
APP_DISTRIBUTION = "lifeboatcache"
#: distribution name prefix -> kind (DESIGN §2 naming); any other ``lifeboatcache-<x>`` is an adapter
_DIST_KINDS: tuple[tuple[str, Kind], ...] = (
    ("lifeboatcache-backend-", "backend"), ("lifeboatcache-manifest-", "manifest"), ("lifeboatcache-codec-", "codec"),
    ("lifeboatcache-policy-", "policy"),
)
_EXTRA_REQUIREMENT = re.compile(r"""^\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;\s*extra\s*==\s*["']([^"']+)["']\s*$""")


def first_party_from_requirements(requirements: list[str]) -> dict[tuple[Kind, str], tuple[str, str]]:
    """``(kind, name) -> (distribution, extra)`` from the app's ``Requires-Dist`` lines.

    The app has one extra per first-party plugin name (its setup.py computes them from the
    package folders), so ``name`` is the extra and the distribution's name says the kind.
    """
    out: dict[tuple[Kind, str], tuple[str, str]] = {}
    for line in requirements:
        match = _EXTRA_REQUIREMENT.match(line)
        if match is None:
            continue
        dist, extra = match.group(1).lower().replace("_", "-"), match.group(2)
        if not dist.startswith("lifeboatcache-") or dist.startswith("lifeboatcache-core"):
            continue
        kind: Kind = next((k for prefix, k in _DIST_KINDS if dist.startswith(prefix)), "adapter")
        out[(kind, extra)] = (dist, extra)
    return out


@functools.cache
def first_party() -> dict[tuple[Kind, str], tuple[str, str]]:
    """First-party names whose package may simply not be installed: ``(kind, name) -> (dist, extra)``.

    Lets ``backend = "s3"`` without the package say exactly what to install. Read from the
    installed app's metadata rather than listed here, so a new first-party package needs no
    edit to core; with the core alone installed there is no hint (an unknown name).
    """
    try:
        requirements = importlib.metadata.requires(APP_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    return first_party_from_requirements(requirements)


@dataclass
class Registration:
    """One registered implementation: strings only until ``load``."""

    kind: Kind
    name: str
    target: str
    config: str | None = None
    requires: list[str] = field(default_factory=list)
    extra: str | None = None
    plugin: str = ""
    distribution: str = ""
    version: str = ""


@dataclass
class PluginStatus:
    """A plugin (entry point) as the loader saw it."""

    plugin: str
    distribution: str
    version: str
    status: str  # "ok" | "FAILED: reason" | "inactive"
    error: BaseException | None = None


def import_string(target: str) -> Any:
    """Import ``"pkg.module:Attr"``."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"import string {target!r} must look like 'package.module:Name'")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registrar:
    """Handed to the ``lifeboatcache_add_*`` hooks of one plugin."""

    def __init__(self, registry: PluginRegistry, plugin: str, distribution: str, version: str) -> None:
        self._registry = registry
        self._plugin = plugin
        self._distribution = distribution
        self._version = version

    def _add(self, kind: Kind, name: str, target: str, config: str | None,
             requires: list[str] | None, extra: str | None) -> None:
        self._registry.add(Registration(
            kind, name, target, config, list(requires or []), extra,
            self._plugin, self._distribution, self._version,
        ))

    def backend(self, name: str, target: str, *, config: str | None = None,
                requires: list[str] | None = None, extra: str | None = None) -> None:
        self._add("backend", name, target, config, requires, extra)

    def manifest(self, scheme: str, target: str, *, requires: list[str] | None = None,
                 extra: str | None = None) -> None:
        """A ``ManifestStore`` for ``manifest_url``s of this scheme (``postgresql`` serves ``postgresql+psycopg:``)."""
        self._add("manifest", scheme, target, None, requires, extra)

    def codec(self, name: str, target: str, *, config: str | None = None,
              requires: list[str] | None = None, extra: str | None = None) -> None:
        self._add("codec", name, target, config, requires, extra)

    def policy(self, name: str, target: str, *, config: str | None = None,
               requires: list[str] | None = None, extra: str | None = None) -> None:
        self._add("policy", name, target, config, requires, extra)

    def adapter(self, name: str, target: str, *, config: str | None = None,
                requires: list[str] | None = None, extra: str | None = None) -> None:
        self._add("adapter", name, target, config, requires, extra)


class PluginRegistry:
    """Registered names per kind, plugin load status, and cached loaded classes."""

    def __init__(self) -> None:
        self.entries: dict[Kind, dict[str, Registration]] = {k: {} for k in KINDS}
        self.plugins: dict[str, PluginStatus] = {}
        self._loaded: dict[tuple[Kind, str], Any] = {}

    def add(self, reg: Registration) -> None:
        existing = self.entries[reg.kind].get(reg.name)
        if existing is not None and existing.target != reg.target:
            raise DuplicatePluginError(
                f"{reg.kind} {reg.name!r} is registered by both {existing.distribution or existing.plugin} "
                f"and {reg.distribution or reg.plugin}; uninstall one or disable it with "
                f"LIFEBOATCACHE_DISABLE_PLUGINS={reg.plugin}"
            )
        self.entries[reg.kind][reg.name] = reg

    def names(self, kind: Kind) -> list[str]:
        return sorted(self.entries[kind])

    def registration(self, kind: Kind, name: str) -> Registration:
        try:
            return self.entries[kind][name]
        except KeyError:
            pass
        failed = self._failed_plugin_for(kind, name)
        if failed is not None:
            raise PluginLoadError(
                f"{kind} {name!r}: its plugin {failed.plugin!r} ({failed.distribution}) failed to load: "
                f"{failed.status.removeprefix('FAILED: ')}"
            ) from failed.error
        hint = first_party().get((kind, name))
        if hint is not None:
            raise MissingPluginPackageError(kind, name, *hint)
        raise UnknownPluginError(kind, name, self.names(kind))

    def _failed_plugin_for(self, kind: Kind, name: str) -> PluginStatus | None:
        for status in self.plugins.values():
            if status.error is not None and status.plugin == name:
                return status
        dist = first_party().get((kind, name), (None,))[0]
        for status in self.plugins.values():
            if status.error is not None and dist and status.distribution == dist:
                return status
        return None

    def load(self, kind: Kind, name: str) -> Any:
        """Import and return the class registered as ``name``; errors say what to do."""
        cache_key = (kind, name)
        if cache_key in self._loaded:
            return self._loaded[cache_key]
        reg = self.registration(kind, name)
        try:
            obj = import_string(reg.target)
        except ImportError as exc:
            hint = ""
            if reg.extra:
                hint = f" Install its dependencies with: pip install 'lifeboatcache[{reg.extra}]'"
            elif reg.requires:
                hint = f" It requires: {', '.join(reg.requires)}."
            raise PluginLoadError(
                f"{kind} {name!r} ({reg.target}, from {reg.distribution or reg.plugin}) failed to import: "
                f"{exc}.{hint}"
            ) from exc
        self._loaded[cache_key] = obj
        return obj

    def config_model(self, kind: Kind, name: str) -> Any:
        """The pydantic model of ``name``'s options (its class's ``config_model`` by default)."""
        reg = self.registration(kind, name)
        if reg.config:
            try:
                return import_string(reg.config)
            except ImportError as exc:
                raise PluginLoadError(f"{kind} {name!r}: config model {reg.config} failed to import: {exc}") from exc
        return self.load(kind, name).config_model
