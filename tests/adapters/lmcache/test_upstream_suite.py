"""LMCache's own L2-adapter contract tests (its release's test_mock_l2_adapter.py, fetched from
PyPI) against LifeboatL2Adapter, in the engine venv: tools/upstream_suites/run_lmcache_l2_tests.py.
The runner's plugin lists the mock- and capacity-only tests it deselects and any known gap it
runs as a strict xfail (none now), each with a reason; everything else must pass, nothing may be skipped."""

from __future__ import annotations

import pytest

from tests.adapters.engine_venv import ENGINE_PYTHON
from tests.adapters.upstream_suites import run_upstream


@pytest.mark.slow
def test_lmcache_own_l2_adapter_tests_pass_against_lifeboat_adapter() -> None:
    status, counts, out = run_upstream(ENGINE_PYTHON, "run_lmcache_l2_tests.py")
    assert status == 0, out[-4000:]
    assert counts.get("passed", 0) >= 40, out[-4000:]
    assert not {"failed", "error", "errors", "skipped", "xpassed"} & set(counts), out[-4000:]
