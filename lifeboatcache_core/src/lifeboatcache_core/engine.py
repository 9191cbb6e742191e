"""Opening the cache for an engine: the one place that honours ``engine.on_error``.

Every adapter (vLLM, SGLang, LMCache) starts the same way: read its settings, build a
``TieredCache``, register its namespace, start the node dashboard, and when anything of that
fails either refuse to start the engine (``on_error = "fail"``) or log one line and let the
engine serve without us (``"serve"``). That logic lives here once, so the adapters keep only
the translation between their engine's types and ours, and the rule is the same for all of
them: with ``"fail"`` a tier that is down at start is a refusal too (README: "a broken tier:
serve uncached or refuse to start").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig, OnError
from lifeboatcache_core.dashboard_hook import start_dashboard
from lifeboatcache_core.errors import LifeboatError
from lifeboatcache_core.keys import Namespace


class TiersUnavailableError(LifeboatError):
    """``engine.on_error = "fail"`` and a configured tier is down at start."""


@dataclass(frozen=True)
class EngineTexts:
    """How one adapter words a cache that cannot start, in its engine's terms.

    Operators search logs for these lines, so each adapter keeps its own wording.
    """

    #: the logger of the adapter (``lifeboatcache.vllm``, ...), so its level and handlers apply
    log: logging.Logger
    #: the message of the error that stops the engine; ``{exc}`` is the reason
    refuse: str
    #: the one ERROR line when the engine serves without us; ``%s`` is the reason
    serve: str
    #: the exception class raised with ``refuse`` (an adapter's own, for engines that catch it)
    error: type[Exception] = RuntimeError


def open_for_engine(prepare: Callable[[], LifeboatConfig], *, on_error: Callable[[], OnError],
                    texts: EngineTexts, namespace: Callable[[], Namespace | None] | None = None,
                    ready: Callable[[TieredCache], object] | None = None,
                    disabled: Callable[[Exception, OnError], object] | None = None) -> TieredCache | None:
    """The engine's cache, or None when it serves without one; raises only under ``on_error = "fail"``.

    ``prepare`` is the adapter's own set-up (validate its settings, work out its namespace)
    and returns our config: its errors are start failures like ours. Then the cache is
    built, ``namespace()`` (if given) registered, a tier down at start refused under
    ``"fail"``, ``ready(cache)`` run (the adapter's checks and its "ready" line) and the
    dashboard started (last: it never shows a cache that is then closed). On any failure the
    cache is closed, ``disabled(exc, on_error)`` lets the adapter release its engine-side
    resources, and the refusal is raised or the serve line logged. ``on_error`` is read
    only when needed, by the adapter's lenient reader (the config may be what is broken).
    """
    cache: TieredCache | None = None
    try:
        cache = TieredCache(prepare())
        ns = namespace() if namespace is not None else None
        if ns is not None:
            cache.register_namespace(ns)
        down = [f"{t.name}: {t.reason}" for t in cache.all_tiers if not t.up]
        if down and on_error() == "fail":
            raise TiersUnavailableError(f"tiers not available: {'; '.join(down)}")
        if ready is not None:
            ready(cache)
    except Exception as exc:
        if cache is not None:
            cache.close()
        policy = on_error()
        if disabled is not None:
            disabled(exc, policy)
        if policy == "fail":
            raise texts.error(texts.refuse.format(exc=exc)) from exc
        texts.log.error(texts.serve, exc)
        return None
    start_dashboard(cache)  # the node's page and /metrics on 127.0.0.1:9400; never raises
    return cache
