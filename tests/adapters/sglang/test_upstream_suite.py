"""SGLang's own storage-backend tests (the test_mooncake_store.py its 0.5.23 wheel ships, checked
against the wheel's RECORD) against LifeboatHiCacheStorage, in the engine venv:
tools/upstream_suites/run_sglang_storage_tests.py. Its plugin builds our backend where the file
builds Mooncake's and runs test_batch_operation with the four configurations the file's own
__main__ uses; every test must pass, nothing may be skipped or deselected."""

from __future__ import annotations

import pytest

from tests.adapters.engine_venv import ENGINE_PYTHON
from tests.adapters.upstream_suites import run_upstream


@pytest.mark.slow
def test_sglang_own_storage_backend_tests_pass_against_lifeboat_backend() -> None:
    status, counts, out = run_upstream(ENGINE_PYTHON, "run_sglang_storage_tests.py")
    assert status == 0, out[-4000:]
    assert counts.get("passed", 0) == 5, out[-4000:]  # the single-key test and 4 batch configurations
    assert not {"failed", "error", "errors", "skipped", "xfailed", "xpassed", "deselected"} & set(counts), out[-4000:]
