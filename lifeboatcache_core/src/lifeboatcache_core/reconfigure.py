"""A new configuration for a running TieredCache, as a *plan* (``TieredCache.apply_config`` carries it out).

:func:`plan_config` is a pure function of two configs: it touches no tier and no cache. It says
which configured tiers to add (built by the cache's one factory, ``TieredCache.make_tier``),
remove and change, what happens to the local fallback, the running config afterwards and the
lines to report. ``TieredCache.apply_config`` owns its tier list and does the rest.

What changes live: tier capacities (a smaller one evicts at once), policies (stored blocks are
handed to the new policy), codecs (new writes; stored blocks still decode by the codec tag in
their meta), write mode, health thresholds, tiers added / removed / reordered, ``promote`` and
the local fallback, a tier's ``stage`` switch (the ``[staging]`` table is applied by
``TieredCache.apply_config`` itself, to its stager). What needs a restart is reported, one
line each, and left as it runs:
a tier's backend or backend options (its storage), ``io_threads``, the ``engine`` section
(adapters read it at start) and the ``dashboard`` section (its server is already bound).

Removing a tier forgets it: its blocks stay in storage (a later config can add it back).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lifeboatcache_core.config import LifeboatConfig, TierConfig

#: tier fields that change live; any other field (io_threads, manifest, ...) needs a restart
_LIVE_FIELDS = frozenset({"name", "backend", "capacity_gb", "codec", "codec_options", "policy", "policy_options",
                          "write", "unhealthy_after", "reprobe_seconds", "stage"})
_GB = 1024**3


@dataclass
class Reconfiguration:
    """What ``apply_config`` did (``applied``) and what waits for a restart (``restart``)."""

    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TierChange:
    """A configured tier kept across the change: what its ``Tier`` must do, and its config after."""

    name: str
    in_force: TierConfig  # the new config, except fields that need a restart (kept as running)
    capacity_bytes: int | None = None  # resize to this
    policy: bool = False  # replace the policy with ``in_force``'s
    codec: bool = False  # encode new writes with ``in_force``'s codec
    applied: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """Everything :func:`plan_config` decided from the two configs, in the order to report it."""

    tiers: tuple[TierConfig, ...]  # the configured tiers after the change, top first, configs in force
    add: tuple[str, ...]  # tiers to build and open (names, in ``tiers``)
    change: dict[str, TierChange]  # kept tiers, by name
    remove: tuple[str, ...]  # configured tiers to forget, in their old order
    #: what to do with a local fallback tier the cache added: drop it (why), or resize it
    fallback_remove: str | None
    fallback_capacity_bytes: int | None
    fallback_lines: tuple[str, ...]  # for a fallback tier that is kept
    fallback_changed: bool  # the ``fallback_local`` table differs (reported when no fallback tier runs)
    reordered: bool  # kept tiers come in another order
    running: LifeboatConfig  # the config in force afterwards
    applied: tuple[str, ...]  # whole-cache lines (promote), after the tiers'
    restart: tuple[str, ...]  # whole-cache lines (engine, dashboard), after the tiers'


def _backend_identity(tc: TierConfig) -> tuple[str, dict[str, object]]:
    return tc.backend, dict(tc.model_extra or {})


def _tier_change(old: TierConfig, new: TierConfig) -> TierChange:
    """What keeping a tier configured as ``old`` under ``new`` takes."""
    name = old.label
    if _backend_identity(old) != _backend_identity(new):
        return TierChange(name, old, restart=(
            f"tier {name}: backend {old.backend!r} -> {new.backend!r} or its options changed; this needs a restart "
            f"(or add the new storage as a tier under another name and remove {name!r})",
        ))
    restart_fields = sorted(set(TierConfig.model_fields) - _LIVE_FIELDS)
    kept = {f: getattr(old, f) for f in restart_fields if getattr(old, f) != getattr(new, f)}
    restart = tuple(f"tier {name}: {f} {value} -> {getattr(new, f)} needs a restart" for f, value in kept.items())
    applied: list[str] = []
    capacity = policy = codec = None
    if old.capacity_gb != new.capacity_gb:
        capacity = new.capacity_bytes
        applied.append(f"tier {name}: capacity {old.capacity_gb:g} GB -> {new.capacity_gb:g} GB")
    if (old.policy, old.policy_options) != (new.policy, new.policy_options):
        policy = True
        applied.append(f"tier {name}: policy {old.policy} -> {new.policy} {new.policy_options or ''}".rstrip())
    if (old.codec, old.codec_options) != (new.codec, new.codec_options):
        codec = True
        options = new.codec_options or ""
        applied.append(f"tier {name}: codec {old.codec} -> {new.codec} {options} for new writes".rstrip())
    if old.stage != new.stage:
        applied.append(f"tier {name}: stage {old.stage} -> {new.stage}")
    if old.write != new.write:
        applied.append(f"tier {name}: write {old.write} -> {new.write}")
    for f in ("unhealthy_after", "reprobe_seconds"):
        if getattr(old, f) != getattr(new, f):
            applied.append(f"tier {name}: {f} {getattr(old, f)} -> {getattr(new, f)}")
    in_force = new.model_copy(update=kept) if kept else new
    return TierChange(name, in_force, capacity, bool(policy), bool(codec), tuple(applied), restart)


def plan_config(old: LifeboatConfig, new: LifeboatConfig) -> Plan:
    """How to bring a cache running ``old`` to ``new``: a pure function, no tier is touched."""
    old_cfgs = {tc.label: tc for tc in old.tiers}
    change = {tc.label: _tier_change(old_cfgs[tc.label], tc) for tc in new.tiers if tc.label in old_cfgs}
    tiers = tuple(change[tc.label].in_force if tc.label in change else tc for tc in new.tiers)
    add = tuple(tc.label for tc in new.tiers if tc.label not in old_cfgs)
    new_names = {tc.label for tc in new.tiers}
    remove = tuple(tc.label for tc in old.tiers if tc.label not in new_names)

    fb_old, fb_new = old.fallback_local, new.fallback_local
    fallback_remove = ("disabled" if not fb_new.enabled else "path changed"
                       if fb_new.path != fb_old.path else None)
    fallback_capacity = fallback_lines = None
    if fallback_remove is None and fb_new.capacity_gb != fb_old.capacity_gb:
        fallback_capacity = int(fb_new.capacity_gb * _GB)
        fallback_lines = (f"fallback capacity {fb_old.capacity_gb:g} GB -> {fb_new.capacity_gb:g} GB",)

    kept_new = [tc.label for tc in new.tiers if tc.label in old_cfgs]
    kept_old = [tc.label for tc in old.tiers if tc.label in new_names]
    applied = (f"promote {old.promote} -> {new.promote}",) if old.promote != new.promote else ()
    restart = tuple(f"{section}: changes take effect at the next start (kept as running)"
                    for section in ("engine", "dashboard") if getattr(old, section) != getattr(new, section))
    running = new.model_copy(update={"tiers": list(tiers), "engine": old.engine, "dashboard": old.dashboard})
    return Plan(tiers, add, change, remove, fallback_remove, fallback_capacity, fallback_lines or (),
                fb_new != fb_old, kept_new != kept_old, running, applied, restart)
