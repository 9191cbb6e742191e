"""lifeboatcache for SGLang: ``LifeboatHiCacheStorage``, a HiCache L3 storage backend.

Import-light: SGLang and torch are imported only by :mod:`lifeboatcache_sglang.storage`.
"""

from lifeboatcache_sglang.settings import dynamic_extra_config

__all__ = ["dynamic_extra_config"]
