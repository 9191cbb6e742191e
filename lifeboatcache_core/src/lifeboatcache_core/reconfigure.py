"""Apply a new configuration to a running TieredCache (``TieredCache.apply_config``).

What changes live: tier capacities (a smaller one evicts at once), policies (stored blocks are
handed to the new policy), codecs (new writes; stored blocks still decode by the codec tag in
their meta), write mode, health thresholds, tiers added / removed / reordered, ``promote`` and
the local fallback, a tier's ``stage`` switch (the ``[staging]`` table is applied by
``TieredCache.apply_config`` itself, to its stager). What needs a restart is reported, one
line each, and left as it runs:
a tier's backend or backend options (its storage), ``io_threads``, the ``engine`` section
(adapters read it at start) and the ``dashboard`` section (its server is already bound).

Removing a tier forgets it: its blocks stay in storage (a later config can add it back).
The caller (``TieredCache.apply_config``) serialises calls; the tier list is swapped as a new
list, so I/O threads holding the old list keep a consistent view.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lifeboatcache_core.config import LifeboatConfig, TierConfig

if TYPE_CHECKING:
    from lifeboatcache_core.cache import TieredCache
    from lifeboatcache_core.tier import Tier

log = logging.getLogger("lifeboatcache")

#: tier fields this module applies live; any other field (io_threads, manifest, ...) needs a restart
_LIVE_FIELDS = frozenset({"name", "backend", "capacity_gb", "codec", "codec_options", "policy", "policy_options",
                          "write", "unhealthy_after", "reprobe_seconds", "stage"})
_GB = 1024**3


@dataclass
class Reconfiguration:
    """What ``apply_config`` did (``applied``) and what waits for a restart (``restart``)."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)


def _backend_identity(tc: TierConfig) -> tuple[str, dict[str, object]]:
    return tc.backend, dict(tc.model_extra or {})


def _update_tier(tier: Tier, old: TierConfig, new: TierConfig, result: Reconfiguration) -> TierConfig:
    """Apply ``new`` to ``tier`` where it can change live; return the tier config now in force."""
    name = tier.name
    if _backend_identity(old) != _backend_identity(new):
        result.restart.append(
            f"tier {name}: backend {old.backend!r} -> {new.backend!r} or its options changed; this needs a restart "
            f"(or add the new storage as a tier under another name and remove {name!r})"
        )
        return old
    restart_fields = sorted(set(TierConfig.model_fields) - _LIVE_FIELDS)
    kept = {f: getattr(old, f) for f in restart_fields if getattr(old, f) != getattr(new, f)}
    for f, value in kept.items():
        result.restart.append(f"tier {name}: {f} {value} -> {getattr(new, f)} needs a restart")
    in_force = new.model_copy(update=kept) if kept else new
    if old.capacity_gb != new.capacity_gb:
        tier.resize(new.capacity_bytes)
        result.applied.append(f"tier {name}: capacity {old.capacity_gb:g} GB -> {new.capacity_gb:g} GB")
    if (old.policy, old.policy_options) != (new.policy, new.policy_options):
        tier.replace_policy(new)
        result.applied.append(f"tier {name}: policy {old.policy} -> {new.policy} {new.policy_options or ''}".rstrip())
    if (old.codec, old.codec_options) != (new.codec, new.codec_options):
        tier.replace_codec(new)
        result.applied.append(
            f"tier {name}: codec {old.codec} -> {new.codec} {new.codec_options or ''} for new writes".rstrip()
        )
    if old.stage != new.stage:
        result.applied.append(f"tier {name}: stage {old.stage} -> {new.stage}")
    if old.write != new.write:
        tier.write_mode = new.write
        result.applied.append(f"tier {name}: write {old.write} -> {new.write}")
    for f in ("unhealthy_after", "reprobe_seconds"):
        if getattr(old, f) != getattr(new, f):
            result.applied.append(f"tier {name}: {f} {getattr(old, f)} -> {getattr(new, f)}")
    tier.cfg = in_force
    return in_force


def apply_config(cache: TieredCache, new: LifeboatConfig) -> Reconfiguration:
    """Bring ``cache`` to ``new`` where possible; see the module docstring for what is live."""
    old = cache.config
    result = Reconfiguration()
    configured = {tc.label for tc in old.tiers}
    current = {t.name: t for t in cache.all_tiers if t.name in configured}
    fallback = [t for t in cache.all_tiers if t.name not in configured]  # added by _ensure_persistent_tier
    old_cfgs = {tc.label: tc for tc in old.tiers}

    # New tiers are built first: a plugin that fails to load stops the change before anything moved.
    # The cache's own factory builds them, so an added tier is the kind it would be at start (fleet or not).
    added = {tc.label: cache.make_tier(tc) for tc in new.tiers if tc.label not in current}
    tiers: list[Tier] = []
    in_force: list[TierConfig] = []
    for tc in new.tiers:
        tier = current.pop(tc.label, None)
        if tier is None:
            tier = added[tc.label]
            in_force.append(tc)
        else:
            in_force.append(_update_tier(tier, old_cfgs[tc.label], tc, result))
        tiers.append(tier)
    removed = list(current.values())

    fb_old, fb_new = old.fallback_local, new.fallback_local
    for tier in fallback:
        if not fb_new.enabled or fb_new.path != fb_old.path:
            removed.append(tier)
            result.applied.append(f"fallback tier removed ({'disabled' if not fb_new.enabled else 'path changed'})")
        else:
            if fb_new.capacity_gb != fb_old.capacity_gb:
                tier.resize(int(fb_new.capacity_gb * _GB))
                result.applied.append(f"fallback capacity {fb_old.capacity_gb:g} GB -> {fb_new.capacity_gb:g} GB")
            tiers.append(tier)
    if fb_new != fb_old and not fallback:
        result.applied.append("fallback_local updated")

    for tier in added.values():
        if tier.open():
            cache._start_index(tier)
        result.applied.append(
            f"tier {tier.name} added ({tier.backend_name}, {tier.cfg.capacity_gb:g} GB)"
            + ("" if tier.up else f", but it is down: {tier.reason}")
        )
    if [t.name for t in tiers if t.name not in added] != [t.name for t in cache.all_tiers if t not in removed]:
        result.applied.append("tier order: " + " -> ".join(t.name for t in tiers))
    if old.promote != new.promote:
        result.applied.append(f"promote {old.promote} -> {new.promote}")
    for section in ("engine", "dashboard"):
        if getattr(old, section) != getattr(new, section):
            result.restart.append(f"{section}: changes take effect at the next start (kept as running)")

    running = new.model_copy(update={"tiers": in_force, "engine": old.engine, "dashboard": old.dashboard})
    for tier in tiers:
        tier.lower = None
    cache.config = running
    cache.all_tiers = tiers  # a new list: readers holding the old one stay consistent
    cache._ensure_persistent_tier()
    cache._link_tiers()
    if len(cache.all_tiers) > len(tiers):
        result.applied.append(f"fallback tier added: {cache.all_tiers[-1].name} ({cache.all_tiers[-1].reason or 'up'})")
    for tier in removed:
        result.applied.append(f"tier {tier.name} removed (its blocks stay in storage)")
        tier.close()
    for line in result.applied:
        log.info("config: %s", line)
    for line in result.restart:
        log.warning("config: %s", line)
    return result
