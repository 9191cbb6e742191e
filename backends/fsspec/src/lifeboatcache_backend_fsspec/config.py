"""Options of an ``fsspec`` tier (pydantic only: validates without fsspec installed)."""

from __future__ import annotations

from typing import Any, Literal

from lifeboatcache_core.abc import PluginConfig
from pydantic import Field


class FsspecConfig(PluginConfig):
    """``url`` is any fsspec URL; ``storage_options`` go to the filesystem unchanged (fsspec's own
    keyword arguments, documented by each implementation), and are never logged."""

    url: str = Field(description="an fsspec URL, e.g. memory://lifeboat, file:///data/kv, gcs://bucket/kv")
    storage_options: dict[str, Any] = Field(default_factory=dict, repr=False)
    #: "rename": temp file then move (atomic on file systems); "direct": one whole-object write
    #: (atomic on object stores and memory://); "auto" picks by protocol
    write_mode: Literal["auto", "rename", "direct"] = "auto"
    on_corrupt: Literal["quarantine", "delete"] = "quarantine"
