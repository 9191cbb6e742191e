"""The ``sglang`` engine adapter as the plugin registry sees it (import-light)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from lifeboatcache_core.abc import EngineAdapter, release_tuple
from lifeboatcache_core.errors import PluginLoadError

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
        try:
            found = version("sglang")
        except PackageNotFoundError:
            raise PluginLoadError(
                "SGLang is not installed; install it with: pip install 'lifeboatcache-sglang[engine]' "
                f"({cls.engine_requirement})"
            ) from None
        if release_tuple(found) < MIN_VERSION:
            raise PluginLoadError(
                f"SGLang {found} is too old for lifeboatcache (needs {cls.engine_requirement}: the dynamic "
                "storage backend and the v1 zero-copy calls); upgrade with: pip install -U 'sglang>=0.5.19'"
            )
        return found

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backend_name": BACKEND_NAME, "class": self.storage_class,
                "flags": launch_flags()}
