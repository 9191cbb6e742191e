"""The ``sglang`` engine adapter as the plugin registry sees it (import-light)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any, ClassVar

from lifeboatcache_core.abc import EngineAdapter, require_release

from lifeboatcache_sglang.settings import BACKEND_NAME, STORAGE_CLASS, STORAGE_MODULE, launch_flags

MIN_VERSION = (0, 5, 19)


class SGLangAdapter(EngineAdapter):
    """SGLang HiCache: ``LifeboatHiCacheStorage`` loaded with ``--hicache-storage-backend dynamic``."""

    name: ClassVar[str] = "sglang"
    engine: ClassVar[str] = "sglang"
    engine_requirement: ClassVar[str] = "sglang>=0.5.19"
    storage_class: ClassVar[str] = f"{STORAGE_MODULE}:{STORAGE_CLASS}"

    @classmethod
    def check_engine(cls) -> str:
        return require_release("sglang", "SGLang", MIN_VERSION, cls.engine_requirement,
                               "pip install 'lifeboatcache-sglang[engine]'",
                               "the dynamic storage backend and the v1 zero-copy calls", lookup=version)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backend_name": BACKEND_NAME, "class": self.storage_class,
                "flags": launch_flags()}
