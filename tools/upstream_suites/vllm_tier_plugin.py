"""pytest plugin: vLLM's own secondary-tier tests, run against ``LifeboatTier``.

Loaded by ``run_vllm_offload_tests.py`` (``-p vllm_tier_plugin``) over the test files of a
vLLM source release. In each collected module it swaps vLLM's ``FileSystemTierManager`` for
``LifeboatFsTier`` (our tier with one lifeboatcache file tier at the test's ``root_dir``) and
adapts the three harness pieces that name vLLM internals, leaving every test body and
assertion as vLLM wrote it:

- ``lookup_and_wait``: vLLM's waits on the fs tier's private ``_lookup_manager`` queue; ours
  does the same cycle (ask every key, end the scheduler step, ask again) until no key answers
  ``RETRY``, which is how vLLM's scheduler treats a tier that is still deciding.
- the mock ``OffloadingSpec``: vLLM's has no KV groups and 0 bytes per block (its fs tier
  takes the row size from the view); ours gets one group of 16-token blocks whose bytes
  fill a primary row, the geometry a real vLLM spec always carries.
- ``tier.file_mapper.get_file_name(key)``: the path of the key's block file in our file tier,
  so the tests that check, truncate or remove a stored file do it to ours.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _plugin_support import patch_hooks, selection_hook
from lifeboatcache_vllm.tier import LifeboatTier
from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext, ScheduleEndContext
from vllm.v1.kv_offload.config import OffloadingGroupConfig
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

#: tests that test vLLM's fs tier's own internals, not the secondary-tier contract: deselected
NOT_APPLICABLE: dict[str, str] = {
    "test_wait_idle_blocks_until_tasks_complete": "tests vLLM's DualQueueThreadPool alone; no tier is built",
    "test_shutdown_discards_pending_tasks": "asserts on the fs tier's private pool (_pool._load_q, _store_q, "
                                            "_threads)",
    "test_store_load_roundtrip_without_o_direct": "patches the fs tier's probe_o_direct and reads its "
                                                  "_use_o_direct attribute",
    "test_batch_lookup_c_extension": "calls vLLM's fs_io_C batch_lookup directly; no tier is built",
    "test_failed_load_corrects_verdict_and_removes_corrupt_file": "asserts on the fs tier's private "
        "_lookup_manager._lookup_batch (its per-request verdict cache)",
    "test_batched_partial_load_failure_keeps_loaded_blocks": "asserts on the fs tier's private "
        "_lookup_manager._lookup_batch; part (a), successful_keys of a partly failed load, is "
        "covered by tests/adapters/vllm (ours reports every key that loaded)",
    "test_batched_load_first_block_fails_marks_whole_batch": "vLLM's fs tier stops a batch at its first bad "
        "block and then reports nothing loaded; JobResult.successful_keys only asks for 'a subset of the "
        "job's original keys', and ours loads and reports every good block of the batch",
    "test_mixed_job_results_emit_event_only_for_successful_job": "patches the fs tier's batch_store_block",
    "test_partially_failed_store_emits_no_event": "patches the fs tier's batch_store_block and reads its "
                                                  "_store_job_keys",
    "test_events_disabled_by_default": "reads the fs tier's events list and _store_job_keys",
    "test_events_require_global_kv_events_flag": "reads the fs tier's events list and _store_job_keys",
}
#: contract tests ours does not pass (yet): run, expected to fail, strictly (a pass is an error)
KNOWN_GAPS: dict[str, str] = {}

#: how long ``lookup_and_wait`` keeps asking before it returns what the tier last said
LOOKUP_PATIENCE_S = 10.0
TOKENS_PER_BLOCK = 16


class _FileMapper:
    """``FileMapper``'s two members the tests use, for our file tier's block files."""

    def __init__(self, tier: LifeboatTier, root: str) -> None:
        self._tier, self.base_path = tier, root

    def get_file_name(self, key: OffloadKey) -> str:
        cache = self._tier.cache
        assert cache is not None, "tier disabled"
        backend = cache.tiers[0].backend
        assert backend is not None
        return str(backend.path_of(self._tier._key(key)))


class LifeboatFsTier(LifeboatTier):
    """``LifeboatTier`` built from ``FileSystemTierManager``'s constructor arguments.

    ``root_dir`` becomes one lifeboatcache file tier; thread counts map to its I/O threads;
    ``on_error = "fail"`` so that a tier that cannot start raises as vLLM's does.
    ``enable_kv_events`` and ``locality`` go to our tier as they are (the same entry keys).
    """

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 root_dir: str, n_read_threads: int = 4, n_write_threads: int = 4,
                 enable_kv_events: bool = False, locality: str | None = None,
                 backpressure_detector: Any = None) -> None:
        config = {"tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": root_dir,
                             "io_threads": max(1, n_read_threads, n_write_threads)}],
                  "engine": {"on_error": "fail"}}
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector,
                         locality=locality, config=config, enable_kv_events=enable_kv_events)
        self.file_mapper = _FileMapper(self, str(Path(root_dir)))


def _with_geometry(spec: Any, row_bytes: int) -> Any:
    """vLLM's mock spec as a real ``OffloadingSpec`` has it: its attributes, a KV group, block bytes.

    The mock is a ``MagicMock``: every attribute a real spec lacks would read as a mock, so the
    spec our tier sees carries exactly the attributes ``OffloadingSpec.__init__`` sets.
    """
    config = spec.config
    if not config.groups:
        group = OffloadingGroupConfig(tokens_per_block=TOKENS_PER_BLOCK, layer_names=("layer.0",), group_id=0)
        config = dataclasses.replace(config, groups=(group,), worker_kv_bytes_per_block=row_bytes)
    return SimpleNamespace(config=config, extra_config=config.extra_config,
                           replicated_layout=config.replicated_layout, kv_events_config=spec.kv_events_config,
                           tokens_per_block=tuple(g.tokens_per_block for g in config.groups),
                           tokens_per_hash=config.cache.tokens_per_hash, blocks_per_chunk=spec.blocks_per_chunk)


def _lookup_and_wait(tier: LifeboatTier, keys: list[OffloadKey], ctx: ReqContext | None = None,
                     timeout: float = LOOKUP_PATIENCE_S) -> list[LookupResult]:
    ctx = ctx if ctx is not None else ReqContext(req_id="test")
    deadline = time.monotonic() + max(timeout, LOOKUP_PATIENCE_S)
    while True:
        results = [tier.lookup(k, ctx) for k in keys]
        if LookupResult.RETRY not in results or time.monotonic() > deadline:
            return results
        tier.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
        time.sleep(0.01)


def _patch_module(module: Any) -> Iterator[None]:
    saved = dict(module.__dict__)
    registry = dict(SecondaryTierFactory._registry)
    SecondaryTierFactory._registry["fs"] = lambda: LifeboatFsTier  # the factory builds ours for "fs"
    if "FileSystemTierManager" in saved:
        module.FileSystemTierManager = LifeboatFsTier
    if "lookup_and_wait" in saved:
        module.lookup_and_wait = _lookup_and_wait
    row_bytes = int(getattr(module, "_BLOCK_ELEMENTS", 0)) * 4  # their rows: float32 elements
    if "_make_offloading_spec" in saved:
        make = saved["_make_offloading_spec"]
        module._make_offloading_spec = lambda *a, **kw: _with_geometry(make(*a, **kw), row_bytes)
    if "_MOCK_OFFLOADING_SPEC" in saved and "_make_offloading_spec" in saved:
        module._MOCK_OFFLOADING_SPEC = module._make_offloading_spec(enable_kv_cache_events=False)
    try:
        yield
    finally:
        module.__dict__.clear()
        module.__dict__.update(saved)
        SecondaryTierFactory._registry = registry


def _uses_vllm_c_ext(item: pytest.Item) -> bool:
    """The fs_io_C variants test vLLM's own C extension path, not a tier contract."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("use_c_ext") is True


pytest_collection_modifyitems = selection_hook(NOT_APPLICABLE, KNOWN_GAPS, drop=_uses_vllm_c_ext)
pytest_runtest_setup, pytest_runtest_teardown = patch_hooks(_patch_module)


