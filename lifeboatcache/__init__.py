"""lifeboatcache: the application (CLI, benchmarks, demo) on top of lifeboatcache_core."""

from lifeboatcache_core import BlockKey, Namespace, __version__

__all__ = ["BlockKey", "Namespace", "__version__"]
