"""Pluggy hook specifications.

Hooks receive a registrar and register *import strings* (fsspec/llm style): nothing heavy is
imported until a config selects the name. Per-block calls are plain methods on the loaded
objects, never hook calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from lifeboatcache_core.registry import Registrar

PROJECT = "lifeboatcache"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def lifeboatcache_add_backends(register: Registrar) -> None:
    """Register storage backends: ``register.backend(name, "pkg.mod:Class", config=..., ...)``."""


@hookspec
def lifeboatcache_add_manifests(register: Registrar) -> None:
    """Register manifest stores by URL scheme: ``register.manifest("sqlite", "pkg.mod:Class", ...)``."""


@hookspec
def lifeboatcache_add_codecs(register: Registrar) -> None:
    """Register codecs: ``register.codec(name, "pkg.mod:Class", ...)``."""


@hookspec
def lifeboatcache_add_policies(register: Registrar) -> None:
    """Register eviction policies: ``register.policy(name, "pkg.mod:Class", ...)``."""


@hookspec
def lifeboatcache_add_adapters(register: Registrar) -> None:
    """Register engine adapters: ``register.adapter(name, "pkg.mod:Class", ...)``."""
