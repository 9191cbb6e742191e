"""pytest plugin: LMCache's own L2-adapter contract tests, run against ``LifeboatL2Adapter``.

Loaded by ``run_lmcache_l2_tests.py`` (``-p lmcache_l2_plugin``) over the test files of an
LMCache source release. ``tests/v1/distributed/test_mock_l2_adapter.py`` is written "based on
the L2AdapterInterface contract defined in base.py" and "only uses public methods"; its
fixtures build the adapter from the module's ``MockL2Adapter``/``MockL2AdapterConfig``. In
each collected module this plugin makes those names build ``LifeboatL2Adapter`` over one
lifeboatcache file tier in a fresh directory (reads hit disk), leaving every test body and
assertion as LMCache wrote it. The mock's simulated bandwidth has no counterpart here
(our adapter moves bytes at the disk's speed): the config's values are ignored.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _plugin_support import file_tier_config, patch_hooks, replace_names, selection_hook
from lifeboatcache_lmcache.l2_adapter import LifeboatL2Adapter

_NO_CAPACITY = ("usage_fraction of an adapter that declares a capacity (global eviction), which the test "
                "expects to be 0.0: ours declares none (max_capacity_bytes = 0, the tiers evict by their own "
                "capacity and policy), so it is -1.0 by the base class's rule")
#: tests of what only a mock or a capacity-declaring adapter does: deselected, each with its reason
NOT_APPLICABLE: dict[str, str] = {
    "test_store_completion_is_delayed_by_bandwidth": "times the mock's simulated bandwidth "
                                                     "(mock_bandwidth_gb); ours moves bytes at the disk's speed",
    "test_get_usage_empty_adapter_is_zero": _NO_CAPACITY,
    "test_get_usage_increases_after_store": _NO_CAPACITY,
    "test_get_usage_decreases_after_delete": _NO_CAPACITY,
}
#: contract tests ours does not pass (yet): run, expected to fail, strictly (a pass is an error)
KNOWN_GAPS: dict[str, str] = {}


class LifeboatMockConfig:
    """Stands in for ``MockL2AdapterConfig``: takes its arguments, keeps none of them."""

    def __init__(self, max_size_gb: float = 1.0, mock_bandwidth_gb: float = 10.0, **_: Any) -> None:
        self.max_size_gb, self.mock_bandwidth_gb = max_size_gb, mock_bandwidth_gb


class LifeboatUnderTest(LifeboatL2Adapter):
    """``LifeboatL2Adapter`` over a file tier of its own, removed again at ``close``."""

    def __init__(self, config: Any = None, **_: Any) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="lifeboat-l2-upstream-"))
        toml = file_tier_config(self._root)
        super().__init__({"lifeboat_config": str(toml)})

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


def _patch_module(module: Any) -> Iterator[None]:
    return replace_names(module, {"MockL2Adapter": LifeboatUnderTest, "MockL2AdapterConfig": LifeboatMockConfig})




pytest_collection_modifyitems = selection_hook(NOT_APPLICABLE, KNOWN_GAPS)
pytest_runtest_setup, pytest_runtest_teardown = patch_hooks(_patch_module)
