"""Reconfiguration as a plan: a pure function of two configs (issue 18), carried out by the cache."""

from __future__ import annotations

from pathlib import Path

from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.reconfigure import plan_config

from .helpers import file_tier, open_cache


def _config(tmp_path: Path, *tiers: dict, **top: object):  # type: ignore[no-untyped-def]
    return load_config_dict({"tiers": list(tiers), "fallback_local": {"path": str(tmp_path / "fb")}, **top})


def test_the_plan_is_computed_from_two_configs_alone(tmp_path: Path) -> None:
    """No cache and no tier exist here: nothing is opened, the plan only describes the change."""
    ram = {"name": "ram", "backend": "dram", "capacity_gb": 1}
    nvme = file_tier(tmp_path / "never-created")
    old = _config(tmp_path, ram, nvme)
    new = _config(tmp_path, {**nvme, "capacity_gb": 2, "policy": "lru", "io_threads": 2, "write": "back"},
                  {"name": "ram2", "backend": "dram", "capacity_gb": 1}, promote=False,
                  fallback_local={"enabled": False})
    plan = plan_config(old, new)
    assert not (tmp_path / "never-created").exists()
    assert [tc.label for tc in plan.tiers] == ["nvme", "ram2"]
    assert plan.add == ("ram2",) and plan.remove == ("ram",) and set(plan.change) == {"nvme"}
    change = plan.change["nvme"]
    assert change.capacity_bytes == 2 * 1024**3 and not change.policy and not change.codec
    assert change.applied == ("tier nvme: capacity 1 GB -> 2 GB", "tier nvme: write through -> back")
    assert change.restart == ("tier nvme: io_threads 4 -> 2 needs a restart",)
    assert change.in_force.io_threads == 4 and change.in_force.write == "back"  # restart fields kept as running
    assert plan.running.tiers[0].io_threads == 4 and plan.running.promote is False
    assert plan.applied == ("promote True -> False",) and plan.restart == ()
    assert plan.fallback_remove == "disabled" and not plan.reordered
    assert plan_config(old, old).change["nvme"].applied == () and not plan_config(old, old).add


def test_the_cache_carries_out_the_plan_it_computes(tmp_path: Path) -> None:
    ram = {"name": "ram", "backend": "dram", "capacity_gb": 1}
    nvme = file_tier(tmp_path / "t")
    with open_cache(tmp_path, ram, nvme) as cache:
        new = cache.config.model_copy(update={"tiers": list(reversed(cache.config.tiers))})
        plan = plan_config(cache.config, new)
        assert plan.reordered and plan.add == () and plan.remove == ()
        ram_tier = cache.all_tiers[0]
        cache.apply_config(new)
        assert [t.name for t in cache.all_tiers] == ["nvme", "ram"] and cache.all_tiers[1] is ram_tier
        assert cache.last_reconfiguration.applied == ["tier order: nvme -> ram"]
        assert cache.all_tiers[0].lower is ram_tier and cache.config.tiers == list(plan.running.tiers)
