"""Shared fixtures. Each test that needs a component starts it (and stops it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_core.plugins import reset_registry

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces" / "kv-cache-tester"


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No plugin state leaks between tests."""
    monkeypatch.delenv("LIFEBOATCACHE_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("LIFEBOATCACHE_LOAD_PLUGINS", raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def traces_dir() -> Path:
    assert TRACES.is_dir(), f"the real traces are expected at {TRACES} (CI has them)"
    return TRACES
