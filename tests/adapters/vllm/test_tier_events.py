"""LifeboatTier's KV events and construction errors, as vLLM's fs tier has them.

vLLM publishes a secondary tier's ``take_events`` (stored chunks) to KV-event consumers such
as a KV-aware router; its own fs tier emits one stored event per finished store job, only when
the entry's ``enable_kv_events`` and vLLM's global KV cache events are both on, and raises
OSError / ValueError for a bad ``root_dir`` / ``locality``. Over a real TieredCache with a real
file tier, built as vLLM's ``SecondaryTierFactory`` builds it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from lifeboatcache_vllm import tier as tier_module
from lifeboatcache_vllm.tier import LifeboatTier, LifeboatTierError
from vllm.v1.kv_offload.base import Locality, Medium

from tests.adapters.vllm.test_tier_unit import CHUNKS, KEYS, SLOT, file_config, finish, job, stub_spec


def events_tier(tmp_path: Path, events_on: bool = True, **kwargs: Any) -> LifeboatTier:
    spec = stub_spec()
    spec.kv_events_config = SimpleNamespace(enable_kv_cache_events=events_on)
    region = np.arange(CHUNKS * SLOT, dtype=np.uint64).astype(np.uint8).reshape(CHUNKS, SLOT)
    return LifeboatTier(spec, memoryview(region), "LifeboatTier", config=file_config(tmp_path / "t"),
                        enable_kv_events=True, **kwargs)


def test_a_stored_event_names_the_stored_chunks_once_the_store_has_completed(tmp_path: Path) -> None:
    tier = events_tier(tmp_path, locality="REMOTE")
    tier.submit_store(job(1, KEYS[:2], [0, 1], False))
    assert list(tier.take_events()) == []  # submitted is not stored: nothing before the job is done
    assert finish(tier, 1).success
    events = list(tier.take_events())
    assert len(events) == 1
    assert events[0].keys == KEYS[:2]
    assert events[0].medium is Medium.STORAGE and events[0].locality is Locality.REMOTE
    assert not events[0].removed
    assert list(tier.take_events()) == []  # taken once
    tier.submit_store(job(2, KEYS[:2], [0, 1], False))  # already here: nothing stored, no new event
    assert finish(tier, 2).success
    assert list(tier.take_events()) == []
    tier.shutdown()


def test_no_events_unless_vllms_kv_events_are_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lifeboatcache.vllm"):
        tier = events_tier(tmp_path, events_on=False)
    assert any("KV cache events are off" in r.message for r in caplog.records)
    tier.submit_store(job(1, KEYS[:1], [0], False))
    assert finish(tier, 1).success
    assert list(tier.take_events()) == []
    tier.shutdown()


def test_events_vllm_does_not_take_are_bounded_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tier_module, "MAX_PENDING_EVENTS", 2)
    tier = events_tier(tmp_path)
    for i in range(3):
        tier.submit_store(job(i, [KEYS[i]], [i], False))
        assert finish(tier, i).success
    assert [e.keys for e in tier.take_events()] == [[KEYS[1]], [KEYS[2]]]  # the oldest went
    assert tier.events_dropped == 1
    assert tier.cpu_report()["kv_events_dropped"] == 1
    tier.shutdown()


def test_a_bad_directory_raises_oserror_as_vllms_fs_tier(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="on_error = 'fail'") as raised:
        LifeboatTier(stub_spec(), memoryview(np.zeros((CHUNKS, SLOT), np.uint8)), "LifeboatTier",
                     config=file_config(blocker / "tier", on_error="fail"))
    assert isinstance(raised.value, LifeboatTierError)  # still ours, for code that catches that


@pytest.mark.parametrize("locality", ["local", ""])
def test_a_locality_vllm_does_not_name_raises_valueerror(tmp_path: Path, locality: str) -> None:
    with pytest.raises(ValueError, match="Locality") as raised:
        LifeboatTier(stub_spec(), memoryview(np.zeros((CHUNKS, SLOT), np.uint8)), "LifeboatTier",
                     config=file_config(tmp_path / "t", on_error="fail"), locality=locality)
    assert isinstance(raised.value, LifeboatTierError)


def test_locality_is_none_unless_given_as_vllms_fs_tier(tmp_path: Path) -> None:
    tier = LifeboatTier(stub_spec(), memoryview(np.zeros((CHUNKS, SLOT), np.uint8)), "LifeboatTier",
                        config=file_config(tmp_path / "t"))
    assert tier.locality is None
    tier.shutdown()


def test_a_removed_event_names_the_chunks_our_tiers_no_longer_hold(tmp_path: Path) -> None:
    tier = events_tier(tmp_path)
    tier.submit_store(job(1, KEYS[:3], [0, 1, 2], False))
    assert finish(tier, 1).success
    assert [e.removed for e in tier.take_events()] == [False]
    assert tier.cache is not None
    nvme = tier.cache.tiers[0]
    nvme.resize(nvme.used - 1)  # the tier's own eviction: at least one chunk goes
    left = [k for k in KEYS[:3] if tier.cache.exists([tier._key(k)])[0]]
    assert 0 < len(left) < 3
    nvme.discard([tier._key(left[0])])  # and one given up (an engine's replacing=, a stager's)
    gone = [k for k in KEYS[:3] if not tier.cache.exists([tier._key(k)])[0]]
    assert left[0] in gone and len(gone) >= 2
    events = list(tier.take_events())
    assert len(events) == 1 and events[0].removed and events[0].medium is Medium.STORAGE
    assert sorted(events[0].keys) == sorted(gone)  # every chunk gone, once, and none still here
    assert list(tier.take_events()) == []
    tier.shutdown()


def test_a_removed_chunk_stored_again_before_vllm_takes_events_is_not_reported_removed(tmp_path: Path) -> None:
    tier = events_tier(tmp_path)
    tier.submit_store(job(1, KEYS[:1], [0], False))
    assert finish(tier, 1).success
    assert tier.cache is not None
    tier.cache.tiers[0].discard([tier._key(KEYS[0])])
    tier.submit_store(job(2, KEYS[:1], [0], False))
    assert finish(tier, 2).success
    events = list(tier.take_events())
    assert [(e.keys, e.removed) for e in events] == [(KEYS[:1], False), (KEYS[:1], False)]
    tier.shutdown()


def test_no_removal_listener_unless_kv_events_are_on(tmp_path: Path) -> None:
    tier = events_tier(tmp_path, events_on=False)
    assert tier.cache is not None and not tier.cache.tiers[0].removal_listeners
    tier.shutdown()
