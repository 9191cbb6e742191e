"""The ``lmcache`` engine adapter as the plugin registry sees it (import-light)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, ClassVar

from lifeboatcache_core.abc import EngineAdapter, require_release

from lifeboatcache_lmcache.settings import ADAPTER_CLASS, ADAPTER_MODULE, l2_adapter_json

MIN_VERSION = (0, 5, 6)


class LMCacheAdapter(EngineAdapter):
    """LMCache MP server L2: ``LifeboatL2Adapter`` loaded with ``--l2-adapter '{"type": "plugin", ...}'``."""

    name: ClassVar[str] = "lmcache"
    engine: ClassVar[str] = "lmcache"
    engine_requirement: ClassVar[str] = "lmcache>=0.5.6"
    adapter_class: ClassVar[str] = f"{ADAPTER_MODULE}:{ADAPTER_CLASS}"

    @classmethod
    def check_engine(cls) -> str:
        return require_release("lmcache", "LMCache", MIN_VERSION, cls.engine_requirement,
                               "pip install 'lifeboatcache-lmcache[engine]'",
                               "the multiprocess server's plugin L2 adapters", lookup=version)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "class": self.adapter_class, "l2_adapter": l2_adapter_json()}
