"""pytest plugin: the storage-backend tests SGLang ships in its wheel, run against ``LifeboatHiCacheStorage``.

Loaded by ``run_sglang_storage_tests.py`` (``-p sglang_storage_plugin``). SGLang's wheel carries
``sglang/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py``: it drives a storage
backend through the ``HiCacheStorage`` interface alone — ``register_mem_pool_host`` with a mock
host pool that describes its pages by ``get_page_buffer_meta`` (the zero-copy interface), the
single-key ``set``/``exists``/``get`` at raw addresses, and ``batch_set_v1``/``batch_exists``/
``batch_get_v1`` by host index for MHA and MLA, TP rank 0 of 1 to rank 3 of 8. In each collected
module this plugin makes the name ``MooncakeStore`` build our backend over one lifeboatcache file
tier in a fresh directory (reads hit disk), and gives ``test_batch_operation`` the ``config``
argument it takes: the four configurations the file's own ``__main__`` runs it with. Every test
body and assertion stays as SGLang wrote it.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.adapters.sglang.engine_checks import sglang_import_shim  # noqa: E402

sglang_import_shim.install()  # before the first SGLang import (triton, torchvision stand-ins)

from _plugin_support import file_tier_config, patch_hooks, replace_names, selection_hook  # noqa: E402
from lifeboatcache_sglang.settings import dynamic_extra_config  # noqa: E402
from lifeboatcache_sglang.storage import LifeboatHiCacheStorage  # noqa: E402

#: tests of what only Mooncake does: deselected, each with its reason (none now)
NOT_APPLICABLE: dict[str, str] = {}
#: tests ours does not pass (yet): run, expected to fail, strictly (a pass is an error)
KNOWN_GAPS: dict[str, str] = {}
#: ``test_batch_operation(config)``'s cases: (is_mla_model, tp_rank, tp_size), as its ``__main__`` runs it
BATCH_CASES = [(False, 0, 1), (True, 0, 1), (False, 1, 4), (True, 3, 8)]


class LifeboatUnderTest(LifeboatHiCacheStorage):
    """``LifeboatHiCacheStorage`` over a file tier of its own, removed again at ``close``."""

    def __init__(self, storage_config: Any, *_: Any, **__: Any) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="lifeboat-sglang-upstream-"))
        toml = file_tier_config(self._root)
        storage_config.extra_config = dynamic_extra_config(lifeboat_config=str(toml))
        super().__init__(storage_config)
        _opened.append(self)

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self._root, ignore_errors=True)


_opened: list[LifeboatUnderTest] = []


@pytest.fixture(params=BATCH_CASES, ids=lambda case: "{}-tp{}of{}".format("mla" if case[0] else "mha", *case[1:]))
def config(request: pytest.FixtureRequest) -> Any:
    """The storage config ``test_batch_operation`` takes, built by the test module's own helper."""
    is_mla_model, tp_rank, tp_size = request.param
    return request.module.make_hicache_storage_config(is_mla_model=is_mla_model, tp_rank=tp_rank, tp_size=tp_size)


def _patch_module(module: Any) -> Iterator[None]:
    try:
        yield from replace_names(module, {"MooncakeStore": LifeboatUnderTest})
    finally:
        while _opened:  # the tests never close their store
            _opened.pop().close()


pytest_collection_modifyitems = selection_hook(NOT_APPLICABLE, KNOWN_GAPS)
pytest_runtest_setup, pytest_runtest_teardown = patch_hooks(_patch_module)
