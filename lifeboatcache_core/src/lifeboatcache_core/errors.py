"""Exceptions. Each message names the thing, the reason and the fix."""

from __future__ import annotations

import difflib


class LifeboatError(Exception):
    """Base class of every lifeboatcache error."""


class ConfigError(LifeboatError, ValueError):
    """A configuration is invalid; the message names the key."""


class UnknownPluginError(LifeboatError, LookupError):
    """A config selects a plugin name that no installed package registers."""

    def __init__(self, kind: str, name: str, available: list[str]) -> None:
        self.kind, self.name, self.available = kind, name, sorted(available)
        close = difflib.get_close_matches(name, self.available, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        super().__init__(
            f"unknown {kind} {name!r}.{hint} Available {kind}s: {', '.join(self.available) or '(none)'}"
        )


class MissingPluginPackageError(LifeboatError, LookupError):
    """A first-party plugin is selected but its package is not installed."""

    def __init__(self, kind: str, name: str, distribution: str, extra: str) -> None:
        self.kind, self.name, self.distribution, self.extra = kind, name, distribution, extra
        super().__init__(
            f"{kind} {name!r} is provided by {distribution}, which is not installed. "
            f"Install it with: pip install 'lifeboatcache[{extra}]'"
        )


class PluginLoadError(LifeboatError, ImportError):
    """A plugin (or a dependency it imports) failed to import; the original error is chained."""


class DuplicatePluginError(LifeboatError):
    """Two distributions register the same name for the same kind."""


class CorruptBlockError(LifeboatError):
    """A stored block failed an integrity check. Always handled as a miss, never surfaced."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class InvalidKeyError(LifeboatError, ValueError):
    """A block key does not have the shape the namespace requires."""


class ManifestError(LifeboatError):
    """A manifest store cannot be opened, read or written; a local one costs a rescan, a shared one the tier."""


class TierUnavailableError(LifeboatError):
    """A tier failed its write probe; the reason says why in operator terms."""


class TierFullError(TierUnavailableError):
    """The store has no room left (a full filesystem, a quota, ``reserve_free_gb``) but reads fine.

    Not a failure of a tier that holds blocks: it keeps serving them and stores what eviction
    makes room for. An empty tier on a full store is down (nothing to serve, nothing fits).
    """
