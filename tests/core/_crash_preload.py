"""Imported once by the crash tests' forkserver: each forked writer starts with modules loaded
and the plugin registry built (entry-point discovery is the slow part of opening a cache)."""

import lifeboatcache_backend_file.backend  # noqa: F401
import lifeboatcache_core.cache  # noqa: F401
import numpy  # noqa: F401
from lifeboatcache_core.plugins import get_registry

get_registry()
