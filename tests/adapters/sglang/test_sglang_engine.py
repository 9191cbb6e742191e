"""SGLang 0.5.23's own HiCache code driving LifeboatHiCacheStorage (in the engine venv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.engine_venv import run_checks


@pytest.mark.slow
def test_hicache_storage_through_sglang() -> None:
    passed, output = run_checks(Path(__file__).parent / "engine_checks")
    assert passed >= 34, output[-3000:]
    assert " skipped" not in output
