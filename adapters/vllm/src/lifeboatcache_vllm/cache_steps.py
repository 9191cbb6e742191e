"""Cache steps of the offline runner: put the engine's own lifeboatcache into a known state.

``lifeboatcache bench returning --stack`` measures a returning session whose blocks sit in a
given tier when its think time starts, with predictive staging on or off. The runner
(``lifeboatcache_vllm.offline``) runs a step's ``"cache"`` list, in order, before the step's
``settle_s`` wait (the think time) and its prompts. Each step is a mapping with ``op``:

- ``{"op": "only_in", "tier": NAME}``: wait until tier NAME holds every block the tiers above it
  hold (write-through stores may still be landing), then discard those blocks from the tiers
  above: the session is now in NAME (and below) only, as if eviction had left it there;
- ``{"op": "staging", "enabled": bool, ...}``: change ``[staging]`` settings live
  (``TieredCache.apply_config``);
- ``{"op": "stage", "session": NAME, "eta_s": SECONDS}``: the router's hint
  (``TieredCache.stage``);
- ``{"op": "staging_idle"}``: wait until the stager has nothing left to do now.

Each returns a small JSON-ready mapping (what it found and did) for the step's result.
"""

from __future__ import annotations

import time
from typing import Any

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import StagingConfig

from lifeboatcache_core import metrics

STAGING_COUNTERS = ("staged_bytes", "staged_used_bytes", "staged_wasted_bytes", "staged_late_arrivals")


def the_cache() -> TieredCache:
    """The one cache the engine's tier opened in this process."""
    caches = metrics.tracked()
    if len(caches) != 1:
        raise RuntimeError(f"cache steps need exactly one open lifeboatcache in the engine process, "
                           f"found {len(caches)}")
    return caches[0]


def only_in(cache: TieredCache, name: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Leave the blocks of the tiers above ``name`` in ``name`` (and below) only."""
    tiers = cache.all_tiers
    names = [t.name for t in tiers]
    if name not in names:
        raise ValueError(f"no tier {name!r}; tiers: {', '.join(names)}")
    j = names.index(name)
    target, above = tiers[j], tiers[:j]
    keys = list({key for tier in above for key in tier.indexed_except(set())})  # each a snapshot under its lock
    deadline = time.monotonic() + timeout_s
    waited = time.monotonic()
    while True:
        missing = [k for k in keys if target.presence(k) is not True]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    held = [k for k in keys if target.presence(k) is True]
    discarded = sum(tier.discard(held) for tier in above)
    return {"blocks": len(keys), "held_in_" + name: len(held), "not_held": len(keys) - len(held),
            "discarded_bytes": discarded, "waited_s": round(time.monotonic() - waited, 3)}


def run_step(op: dict[str, Any], cache: TieredCache | None = None) -> dict[str, Any]:
    """Run one cache step (see the module docstring) on ``cache``, default the engine's own."""
    cache = cache if cache is not None else the_cache()
    kind = op.get("op")
    if kind == "only_in":
        out = only_in(cache, str(op["tier"]), float(op.get("timeout_s", 120.0)))
    elif kind == "staging":
        settings = {**cache.config.staging.model_dump(), **{k: v for k, v in op.items() if k != "op"}}
        cache.apply_config(cache.config.model_copy(update={"staging": StagingConfig.model_validate(settings)}))
        out = {"staging": cache.config.staging.model_dump()}
    elif kind == "stage":
        out = {"known_blocks": cache.stage(str(op["session"]), float(op["eta_s"]))}
    elif kind == "staging_idle":
        out = {"idle": cache.stager.wait_idle(float(op.get("timeout_s", 60.0)))}
    else:
        raise ValueError(f"unknown cache step {kind!r}; use only_in, staging, stage or staging_idle")
    counters = cache.telemetry.counters()
    return {"op": kind, **out, **{k: counters[k] for k in STAGING_COUNTERS}}
