"""LMCache 0.5.6's own adapter factory, bench harness and MP server driving LifeboatL2Adapter
(in the engine venv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.engine_venv import run_checks


@pytest.mark.slow
def test_l2_adapter_through_lmcache() -> None:
    passed, output = run_checks(Path(__file__).parent / "engine_checks")
    assert passed >= 22, output[-3000:]
    assert " skipped" not in output
