"""lifeboatcache core: tiered, persistent, hash-checked KV block store with pluggy plugins."""

from lifeboatcache_core.keys import BlockKey, Namespace
from lifeboatcache_core.version import __version__

__all__ = ["BlockKey", "Namespace", "TieredCache", "__version__"]


def __getattr__(name: str) -> object:
    # TieredCache pulls in the config and registry; keep `import lifeboatcache_core` light.
    if name == "TieredCache":
        from lifeboatcache_core.cache import TieredCache

        return TieredCache
    raise AttributeError(name)
